"""Damaged weight files and saved pipelines: a specific error naming the file and the fault, and nothing half-loaded.

(Missing, truncated, garbage and mismatched AllenNLP files are covered in tests/formats/test_weights.py.)
"""
import io
import pickle
import shutil
from pathlib import Path
from typing import Callable, Tuple

import h5py
import numpy as np
import pytest
import spacy
import srsly
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.errors import ElmoOptionsError, ElmoWeightsError
from spacy_elmo.model.options import ElmoOptions
from spacy_elmo.formats.weights import load_files, read_weights, save_files

from tests.conftest import ALLENNLP
from tests.pipeline.conftest import make_nlp

TEXT = "The cat sat on the mat ."


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The fixture biLM written by this package (as pretraining exports it): options.json + weights.hdf5."""
    out = tmp_path_factory.mktemp("export")
    save_files(load_files(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"), out / "options.json", out / "weights.hdf5")
    return out / "options.json", out / "weights.hdf5"


def flipped(data: bytes, position: int) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 0x01  # the smallest damage there is: one bit
    return bytes(damaged)


def test_written_files_carry_hdf5_checksums(exported):
    with h5py.File(exported[1], "r") as f:
        assert all(f[key].fletcher32 for key in ("char_embed", "CNN_proj/W_proj", "CNN/W_cnn_0"))
    data = exported[1].read_bytes()
    assert data[:8] == b"\x89HDF\r\n\x1a\n" and data[8] >= 2  # superblock version 2+: checksummed metadata


@pytest.mark.parametrize("fraction", [0.0001, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999])
def test_one_flipped_bit_anywhere_in_a_written_file_is_detected(exported, tmp_path, fraction):
    options_file, weight_file = exported
    data = weight_file.read_bytes()
    damaged = tmp_path / "damaged.hdf5"
    damaged.write_bytes(flipped(data, int(len(data) * fraction)))
    with pytest.raises(ElmoWeightsError, match="damaged.hdf5.*(truncated or damaged|NaN)"):
        ElmoEmbedder(options_file, damaged)


def test_every_flipped_bit_is_either_detected_or_harmless(exported):
    """Sweep: 200 positions over the file; a flip must fail the read or leave every weight as it was."""
    options = ElmoOptions.from_file(exported[0])
    data = exported[1].read_bytes()
    original = read_weights(io.BytesIO(data), options)
    detected = 0
    for position in np.linspace(0, len(data) - 1, 200).astype(int):
        try:
            arrays = read_weights(io.BytesIO(flipped(data, position)), options)
        except ElmoWeightsError:
            detected += 1
            continue
        assert all(np.array_equal(arrays[key], original[key]) for key in original), f"silent damage at byte {position}"
    assert detected > 175


def _random_damage(data: bytes, seed: int, sizes: Tuple[int, int]) -> bytes:
    """``data`` with a seeded run of random bytes, its length drawn from ``sizes`` (inclusive), at a seeded offset."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(sizes[0], sizes[1] + 1))
    offset = int(rng.integers(0, len(data) - size + 1))
    damaged = bytearray(data)
    damaged[offset : offset + size] = rng.bytes(size)
    return bytes(damaged)


@pytest.mark.parametrize(
    "source, sizes",
    [
        # AllenNLP's file has no checksums, as the published ones: blocks of random bytes, as a bad disk sector or
        # an interrupted copy leaves them (a few random bytes there can be plausible weights, which nothing catches).
        ("allennlp", (512, 4096)),
        # This package's files carry Fletcher-32 checksums: even a few random bytes are caught.
        ("written", (1, 64)),
    ],
)
def test_random_damage_is_refused_or_harmless(exported, tmp_path, source, sizes):
    """Seeded sweep: a damaged copy must be refused with ElmoWeightsError or give the undamaged file's vectors."""
    options_file, weight_file = (ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5") if source == "allennlp" else exported
    data = weight_file.read_bytes()
    sentence = TEXT.split()
    expected = ElmoEmbedder(options_file, weight_file, initial_state="zeros").embed_sentence(sentence)
    damaged = tmp_path / "damaged.hdf5"
    for seed in range(100):
        damaged.write_bytes(_random_damage(data, seed, sizes))
        try:
            vectors = ElmoEmbedder(options_file, damaged, initial_state="zeros").embed_sentence(sentence)
        except ElmoWeightsError:
            continue
        np.testing.assert_array_equal(vectors, expected, err_msg=f"seed {seed}: damaged weights loaded silently")


def test_truncated_written_file(exported, tmp_path):
    data = exported[1].read_bytes()
    for size in (0, 8, 1000, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.hdf5").write_bytes(data[:size])
        with pytest.raises(ElmoWeightsError, match="cut.hdf5"):
            ElmoEmbedder(exported[0], tmp_path / "cut.hdf5")


def test_options_that_do_not_match_the_weights(exported, tmp_path):
    for edit, message in (
        (lambda d: d["lstm"].update(projection_dim=8), r"W_proj.*shape"),
        (lambda d: d["lstm"].update(n_layers=1), r"unexpected datasets \['RNN_0/RNN/MultiRNNCell/Cell1"),
        (lambda d: d["char_cnn"].update(filters=[[1, 4], [2, 8]]), r"unexpected datasets \['CNN/W_cnn_2'"),
        (lambda d: d["char_cnn"]["embedding"].update(dim=5), r"char_embed.*shape"),
    ):
        data = srsly.read_json(exported[0])
        edit(data)
        srsly.write_json(tmp_path / "options.json", data)
        with pytest.raises(ElmoWeightsError, match=f"weights.hdf5.*{message}"):
            ElmoEmbedder(tmp_path / "options.json", exported[1])


def test_damaged_options_file(exported, tmp_path):
    text = exported[0].read_text()
    (tmp_path / "options.json").write_text(text[: len(text) // 2])
    with pytest.raises(ElmoOptionsError, match="options.json is not valid JSON"):
        ElmoEmbedder(tmp_path / "options.json", exported[1])


# --- saved pipelines --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    nlp = make_nlp()
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    nlp.to_disk(path)
    return path, nlp(TEXT)._.elmo


def damaged_copy(saved_path: Path, tmp_path: Path, damage: Callable[[Path], None]) -> Path:
    path = tmp_path / "damaged"
    shutil.copytree(saved_path, path)
    damage(path / "elmo" / "model")
    return path


def _truncate(fraction: float) -> Callable[[Path], None]:
    return lambda f: f.write_bytes(f.read_bytes()[: int(f.stat().st_size * fraction)])


def _flip(fraction: float) -> Callable[[Path], None]:
    return lambda f: f.write_bytes(flipped(f.read_bytes(), int(f.stat().st_size * fraction)))


DAMAGES = {
    "deleted": (Path.unlink, " \\(No such file or directory\\): the saved pipeline is incomplete"),
    "empty": (_truncate(0.0), "damaged \\(Unpack failed"),
    "truncated_half": (_truncate(0.5), "damaged \\(Unpack failed"),
    "truncated_end": (_truncate(0.9999), "damaged \\(Unpack failed"),
    "flip_options": (lambda f: f.write_bytes(f.read_bytes().replace(b'"cell_clip": 3', b'"cell_clip": 2')), "SHA-256"),
    **{f"flip_{x}": (_flip(x), "damaged") for x in (0.05, 0.3, 0.5, 0.8, 0.99)},
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_saved_pipeline(saved, tmp_path, damage):
    edit, message = DAMAGES[damage]
    path = damaged_copy(saved[0], tmp_path, edit)
    with pytest.raises(ElmoWeightsError, match=f"{path / 'elmo' / 'model'}.*{message}"):
        spacy.load(path)


def test_a_failed_load_leaves_a_working_pipeline_as_it_was(saved, tmp_path):
    # Settings differ from the saved component's (256), so settings half-read from a damaged file would show.
    nlp = make_nlp(max_sentence_tokens=4)
    elmo = nlp.get_pipe("elmo")
    before = nlp(TEXT)._.elmo
    assert not np.allclose(before, saved[1], atol=1e-3)
    for damage in ("truncated_half", "flip_0.5", "flip_0.99", "deleted"):
        path = damaged_copy(saved[0], tmp_path / damage, DAMAGES[damage][0])
        with pytest.raises(ElmoWeightsError):
            elmo.from_disk(path / "elmo", exclude=["vocab"])  # as Language.from_disk calls it
        np.testing.assert_array_equal(nlp(TEXT)._.elmo, before)
    msg = srsly.msgpack_loads(elmo.to_bytes())
    msg["model"] = flipped(msg["model"], len(msg["model"]) // 2)
    with pytest.raises(ElmoWeightsError, match="serialized 'elmo' component.*SHA-256"):
        elmo.from_bytes(srsly.msgpack_dumps(msg))
    np.testing.assert_array_equal(nlp(TEXT)._.elmo, before)


def test_model_files_never_load_through_pickle(saved, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model file was unpickled")

    for module, name in ((pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load"), (srsly, "pickle_loads")):
        monkeypatch.setattr(module, name, refuse)
    np.testing.assert_array_equal(spacy.load(saved[0])(TEXT)._.elmo, saved[1])
    embedder = ElmoEmbedder(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5", initial_state="zeros")
    layers = embedder.embed_sentence(TEXT.split())
    np.testing.assert_allclose(layers[-1], saved[1], atol=1e-5)
