"""ELMoForManyLangs models, converted once, give the vectors their own package computes.

tests/data/manylangs_tiny was made with random weights by the elmoformanylangs package itself
(scripts/make_manylangs_fixture.py), with its outputs for a fresh Embedder in expected.npz.
"""
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.sources.catalog import MANYLANGS_ARCHITECTURE
from spacy_elmo.formats.manylangs import PUBLISHED_ARCHITECTURE, ManyLangsError, convert, convert_archive, read_lexicon
from spacy_elmo.model.options import ElmoOptions
from tests.conftest import ROUNDING

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "manylangs_tiny"
SENTENCES = json.loads((FIXTURE / "sentences.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("converted")
    convert(FIXTURE, folder / "options.json", folder / "weights.hdf5")
    return folder / "options.json", folder / "weights.hdf5"


def test_converted_model_reproduces_elmoformanylangs(converted):
    expected = np.load(FIXTURE / "expected.npz")
    embedder = ElmoEmbedder(*converted)  # "auto" starts from zeros, as their Embedder does
    got = embedder.embed_batch(SENTENCES)
    for i, layers in enumerate(got):
        np.testing.assert_allclose(layers, expected[f"s{i}"], rtol=0, atol=2e-6)


def test_sentences_alone_equal_the_batch(converted):
    embedder = ElmoEmbedder(*converted, cache_size=100)
    together = embedder.embed_batch(SENTENCES)
    for sentence, layers in zip(SENTENCES, together):
        np.testing.assert_allclose(embedder.embed_sentence(sentence), layers, **ROUNDING)


def test_lexicon_reads_a_stripped_entry_as_ideographic_space():
    entries = read_lexicon(FIXTURE / "char.dic")
    assert entries[-1] == "\u3000" and entries[:2] == ["<bos>", "<eos>"]


def test_options_keep_the_tables_and_round_trip(converted, tmp_path):
    options = ElmoOptions.from_file(converted[0])
    assert options.char_vocabulary["begin_of_word"] == "<eow>"
    assert options.n_characters == len(read_lexicon(FIXTURE / "char.dic")) + 1
    options.to_file(tmp_path / "again.json")
    assert ElmoOptions.from_file(tmp_path / "again.json") == options


def test_archive_with_a_subfolder_converts(tmp_path):
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in FIXTURE.iterdir():
            zf.write(path, f"xx.model/{path.name}")
    options = convert_archive(archive, tmp_path / "work", tmp_path / "o.json", tmp_path / "w.hdf5")
    assert options.word_dim == 6 and not (tmp_path / "work").exists()


def test_a_pickle_carrying_code_is_refused(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(FIXTURE, folder)

    class Payload:
        def __reduce__(self):
            return (print, ("executed",))

    torch.save({"x": Payload()}, folder / "encoder.pkl")
    with pytest.raises(ManyLangsError, match="not a plain PyTorch state_dict"):
        convert(folder, tmp_path / "o.json", tmp_path / "w.hdf5")
    assert not (tmp_path / "w.hdf5").exists()


def test_an_unpacked_folder_lacking_a_file_is_refused_naming_it(tmp_path):
    folder = tmp_path / "unpacked"
    shutil.copytree(FIXTURE, folder / "xx.model")
    (folder / "xx.model" / "encoder.pkl").unlink()
    with pytest.raises(ManyLangsError, match=f"{folder} lacks \\['encoder.pkl'\\]"):
        convert_archive(folder, tmp_path / "work", tmp_path / "o.json", tmp_path / "w.hdf5")
    assert not (tmp_path / "w.hdf5").exists() and not (tmp_path / "work").exists()


def test_the_catalogue_expects_the_published_architecture():
    arch = PUBLISHED_ARCHITECTURE
    sizes = {
        "n_layers": arch["encoder"]["n_layers"],
        "lstm_dim": arch["encoder"]["dim"],
        "projection_dim": arch["encoder"]["projection_dim"],
        "n_filters": sum(n for _, n in arch["token_embedder"]["filters"]),
        "n_highway": arch["token_embedder"]["n_highway"],
        "word_dim": arch["token_embedder"]["word_dim"],
    }
    assert MANYLANGS_ARCHITECTURE == sizes
