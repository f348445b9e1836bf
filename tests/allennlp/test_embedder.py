"""0.9's ElmoEmbedder: the reference fixture through its methods, its handling of empty input, its HDF5 layout."""
import io
import json

import h5py
import numpy as np
import pytest

from spacy_elmo.allennlp import ElmoEmbedder
from spacy_elmo.allennlp import ConfigurationError
from spacy_elmo.errors import NotDownloadedError
from tests.allennlp.conftest import reference_batches
from tests.conftest import ALLENNLP, ROUNDING

LINES = ["The first line .", "A second , longer line of text .", "Third", "The first line ."]


def test_embed_batch_carries_state_as_09_did_and_reproduces_the_reference(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files)
    for sentences, expected in reference_batches(ALLENNLP, "sentences.json"):
        for got, want in zip(embedder.embed_batch(sentences), expected):
            assert got.dtype == np.float32 and got.shape == (3, len(want), 32)
            np.testing.assert_allclose(got[2], want, atol=1e-6, rtol=1e-5)


def test_a_batch_of_one_empty_sentence_runs_nothing(allennlp_files):
    embedder, fresh = ElmoEmbedder(*allennlp_files), ElmoEmbedder(*allennlp_files)
    assert embedder.embed_sentence([]).shape == (3, 0, 32)
    np.testing.assert_array_equal(embedder.embed_sentence(["a", "b"]), fresh.embed_sentence(["a", "b"]))


def test_an_empty_sentence_among_others_gives_an_empty_array(allennlp_files):
    out = ElmoEmbedder(*allennlp_files).embed_batch([["a"], [], ["b", "c"]])
    assert [x.shape for x in out] == [(3, 1, 32), (3, 0, 32), (3, 2, 32)]


def test_embed_sentences_runs_batches_of_batch_size_in_order(allennlp_files):
    sentences = [line.split() for line in LINES]
    got = list(ElmoEmbedder(*allennlp_files).embed_sentences(iter(sentences), batch_size=3))
    by_batch = ElmoEmbedder(*allennlp_files)
    want = by_batch.embed_batch(sentences[:3]) + by_batch.embed_batch(sentences[3:])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_stateless_mode_gives_a_sentence_the_same_vectors_anywhere(allennlp_files):
    embedder = ElmoEmbedder(*allennlp_files, stateful=False)
    alone = embedder.embed_sentence(LINES[1].split())
    embedder.embed_batch([line.split() for line in LINES])
    np.testing.assert_allclose(embedder.embed_batch([["x"], LINES[1].split()])[1], alone, **ROUNDING)


@pytest.mark.parametrize("output_format, pick", [("all", lambda x: x), ("top", lambda x: x[-1]), ("average", lambda x: x.mean(0))])
def test_embed_file_writes_09s_layout(allennlp_files, tmp_path, output_format, pick):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    ElmoEmbedder(*allennlp_files).embed_file(str(tmp_path / "in.txt"), tmp_path / "out.hdf5", output_format, batch_size=2)
    reference = ElmoEmbedder(*allennlp_files)
    want = reference.embed_batch([s.split() for s in LINES[:2]]) + reference.embed_batch([s.split() for s in LINES[2:]])
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert sorted(f) == ["0", "1", "2", "3", "sentence_to_index"]
        for i, layers in enumerate(want):
            np.testing.assert_allclose(f[str(i)][()], pick(layers), rtol=1e-6, atol=1e-7)
        index = json.loads(f["sentence_to_index"][0])
    assert index == {"The first line .": "3", "A second , longer line of text .": "1", "Third": "2"}


def test_embed_file_with_sentence_keys_or_forgetting_sentences(allennlp_files, tmp_path):
    embedder = ElmoEmbedder(*allennlp_files)
    embedder.embed_file(io.StringIO("\n".join(LINES[:3])), tmp_path / "keys.hdf5", "top", use_sentence_keys=True)
    embedder.embed_file(io.StringIO("\n".join(LINES)), tmp_path / "forget.hdf5", forget_sentences=True)
    with h5py.File(tmp_path / "keys.hdf5", "r") as f:
        assert sorted(f) == sorted(LINES[:3]) and f["Third"].shape == (1, 32)
    with h5py.File(tmp_path / "forget.hdf5", "r") as f:
        assert sorted(f) == ["0", "1", "2", "3"]


@pytest.mark.parametrize(
    "text, settings, message",
    [
        ("a\n\nb\n", {}, r"^input_file has empty lines \(0-based: \[1\]\)"),
        ("a\na\n", {"use_sentence_keys": True}, "^use_sentence_keys needs distinct lines, and input_file repeats one"),
        ("a\n", {"output_format": "mean"}, "output_format must be one of"),
    ],
    ids=["blank-line", "repeated-key", "format"],
)
def test_embed_file_mistakes_are_one_line_configuration_errors(allennlp_files, tmp_path, text, settings, message):
    with pytest.raises(ConfigurationError, match=message) as error:
        ElmoEmbedder(*allennlp_files).embed_file(io.StringIO(text), tmp_path / "out.hdf5", **settings)
    assert "\n" not in str(error.value)


def test_without_files_and_without_the_original_model_the_error_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    with pytest.raises(NotDownloadedError, match="python -m spacy_elmo download original, or pass options_file") as error:
        ElmoEmbedder()
    assert "\n" not in str(error.value)


def test_without_files_the_downloaded_original_model_is_used(allennlp_files, downloaded_original):
    np.testing.assert_array_equal(ElmoEmbedder().embed_sentence(["a"]), ElmoEmbedder(*allennlp_files).embed_sentence(["a"]))


def test_an_empty_batch_gives_nothing_and_keeps_the_state(allennlp_files):
    embedder, fresh = ElmoEmbedder(*allennlp_files), ElmoEmbedder(*allennlp_files)
    assert embedder.embed_batch([]) == []
    assert [x.shape for x in embedder.embed_batch([[], []])] == [(3, 0, 32)] * 2
    fresh.embed_batch([[], []])
    np.testing.assert_array_equal(embedder.embed_sentence(["a"]), fresh.embed_sentence(["a"]))



def test_the_two_embedders_called_elmoembedder_say_which_they_are_and_their_state(allennlp_files):
    """spacy_elmo's is stateless by default, AllenNLP 0.9's carries state: each repr names the class and its mode."""
    import spacy_elmo

    dim = 2 * json.loads(allennlp_files[0].read_text())["lstm"]["projection_dim"]
    ours, theirs = spacy_elmo.ElmoEmbedder(*allennlp_files), ElmoEmbedder(*allennlp_files)
    shown = f"layers=3, dim={dim}, precision='fp32', device='cpu')"
    assert repr(ours) == f"spacy_elmo.ElmoEmbedder(stateful=False, {shown}"
    assert repr(theirs) == f"spacy_elmo.allennlp.ElmoEmbedder(stateful=True, {shown}"
