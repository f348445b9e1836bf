import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo.errors import ElmoWeightsError
from spacy_elmo.model.options import ElmoOptions
from spacy_elmo.formats.weights import load_bilm, load_files, read_weights, save_files, weights_to_bytes, bilm_from_bytes
from tests.conftest import ALLENNLP


def _datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, o: out.__setitem__(k, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def test_read_write_read_is_bit_exact(tmp_path, allennlp_files):
    model = load_files(*allennlp_files)
    save_files(model, tmp_path / "options.json", tmp_path / "weights.hdf5")
    original, written = _datasets(allennlp_files[1]), _datasets(tmp_path / "weights.hdf5")
    assert original.keys() == written.keys()
    for key in original:
        assert original[key].dtype == written[key].dtype
        np.testing.assert_array_equal(original[key], written[key])
    again = load_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)


def test_save_files_creates_missing_folders(tmp_path, allennlp_files):
    model = load_files(*allennlp_files)
    out = tmp_path / "new" / "model"
    save_files(model, out / "options.json", out / "weights.hdf5")
    assert load_files(out / "options.json", out / "weights.hdf5").options == model.options


def test_bytes_round_trip_and_float16_storage(allennlp_files):
    model = load_files(*allennlp_files)
    same = bilm_from_bytes(model.options, weights_to_bytes(model))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values()))
    half = bilm_from_bytes(model.options, weights_to_bytes(model, dtype="float16"))
    assert half.w_proj.dtype == torch.float32
    assert torch.allclose(half.w_proj, model.w_proj, atol=1e-3)


def test_missing_weight_file(tmp_path, allennlp_files):
    with pytest.raises(ElmoWeightsError, match="not found.*missing.hdf5"):
        load_files(allennlp_files[0], tmp_path / "missing.hdf5")


def test_truncated_file_names_the_file(tmp_path, allennlp_files):
    data = allennlp_files[1].read_bytes()
    (tmp_path / "cut.hdf5").write_bytes(data[: len(data) // 2])
    with pytest.raises(ElmoWeightsError, match="cut.hdf5"):
        load_files(allennlp_files[0], tmp_path / "cut.hdf5")


def test_garbage_file(tmp_path, allennlp_files):
    (tmp_path / "junk.hdf5").write_bytes(b"not an hdf5 file at all" * 100)
    with pytest.raises(ElmoWeightsError, match="junk.hdf5.*cannot be read as HDF5"):
        load_files(allennlp_files[0], tmp_path / "junk.hdf5")


def _edited_copy(tmp_path, source, edit):
    path = tmp_path / "edited.hdf5"
    shutil.copy(source, path)
    with h5py.File(path, "a") as f:
        edit(f)
    return path


def test_wrong_shape_names_key_expected_and_found(tmp_path, allennlp_files):
    def edit(f):
        del f["CNN_proj/b_proj"]
        f["CNN_proj/b_proj"] = np.zeros(17, dtype=np.float32)

    path = _edited_copy(tmp_path, allennlp_files[1], edit)
    with pytest.raises(ElmoWeightsError, match=r"edited.hdf5.*'CNN_proj/b_proj'.*\(17,\).*\(16,\)"):
        load_files(allennlp_files[0], path)


def test_missing_key(tmp_path, allennlp_files):
    path = _edited_copy(tmp_path, allennlp_files[1], lambda f: f.__delitem__("char_embed"))
    with pytest.raises(ElmoWeightsError, match="missing datasets \\['char_embed'\\]"):
        load_files(allennlp_files[0], path)


def test_non_finite_values(tmp_path, allennlp_files):
    def edit(f):
        f["CNN_proj/b_proj"][3] = np.nan

    path = _edited_copy(tmp_path, allennlp_files[1], edit)
    with pytest.raises(ElmoWeightsError, match="NaN"):
        load_files(allennlp_files[0], path)


def test_finite_values_far_beyond_any_real_weight_are_refused(tmp_path, allennlp_files):
    def edit(f):
        f["CNN_high_0/W_carry"][5, 7] = 6.5e37  # what random bytes over a dataset decode to (a damaged file)

    path = _edited_copy(tmp_path, allennlp_files[1], edit)
    with pytest.raises(ElmoWeightsError, match=r"edited.hdf5: dataset 'CNN_high_0/W_carry' holds values up to 6\.5e\+37"):
        load_files(allennlp_files[0], path)


def test_plausible_weights_giving_absurd_vectors_are_refused(tmp_path, allennlp_files):
    def edit(f):  # every value below the weight bound of 1000; together they give layer-0 vectors near 6e7
        f["CNN_proj/W_proj"][...] = 999.0
        for i in range(5):
            f[f"CNN/b_cnn_{i}"][...] = 999.0

    path = _edited_copy(tmp_path, allennlp_files[1], edit)
    with pytest.raises(ElmoWeightsError, match=r"edited.hdf5: layer 0 of the biLM gives values of .*e\+0[78] on a probe"):
        load_files(allennlp_files[0], path)


def test_options_that_do_not_match_the_weights(allennlp_files):
    data = ElmoOptions.from_file(allennlp_files[0]).to_dict()
    data["char_cnn"]["n_highway"] = 1
    with pytest.raises(ElmoWeightsError, match="unexpected datasets \\['CNN_high_1/"):
        load_bilm(ElmoOptions.from_dict(data), allennlp_files[1])
    data["char_cnn"]["n_highway"] = 2
    data["lstm"]["dim"] = 32
    with pytest.raises(ElmoWeightsError, match="W_0.*shape"):
        load_bilm(ElmoOptions.from_dict(data), allennlp_files[1])


def test_read_weights_returns_float32(allennlp_files):
    arrays = read_weights(allennlp_files[1], ElmoOptions.from_file(allennlp_files[0]))
    assert all(a.dtype == np.float32 for a in arrays.values()) and len(arrays) == 1 + 10 + 8 + 2 + 12


# Options that do not fit the fixture's weights: before the sizes were bounded and compared with the
# file's metadata first, the first three ran for minutes into a MemoryError. Each: the edit, the error class and
# what the message must say (the fixture's options.json states what its weights hold).
MISFITS = {
    "n_layers": ({"lstm": {"n_layers": 1000000}}, "ElmoOptionsError", "lstm.n_layers is 1000000, above the 16"),
    "n_highway": ({"char_cnn": {"n_highway": 1000000}}, "ElmoOptionsError", "char_cnn.n_highway is 1000000, above"),
    "max_characters_per_token": (
        {"char_cnn": {"max_characters_per_token": 1000000000}},
        "ElmoOptionsError",
        "char_cnn.max_characters_per_token is 1000000000, above the 1024",
    ),
    "filters": (
        {"char_cnn": {"filters": [[1, 4], [2, 8], [3, 16], [4, 32], [5, 32]]}},
        "ElmoWeightsError",
        "char_cnn.filters is [[1, 4], [2, 8], [3, 16], [4, 32], [5, 32]] in the options but "
        "[[1, 4], [2, 8], [3, 16], [4, 32], [5, 64]] in the weights",
    ),
    "projection_dim": (
        {"lstm": {"projection_dim": 8}},
        "ElmoWeightsError",
        "lstm.projection_dim is 8 in the options but 16 in the weights",
    ),
}

# Loads every misfit by the two ways options reach the weights (from a file, as ElmoEmbedder, the architecture,
# embed and download do; from a dict and bytes, as from_disk/from_bytes do) under a 3 GiB address-space limit,
# and prints, per case and way, the error's class and message.
_LOAD_MISFITS = """
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from spacy_elmo import ElmoEmbedder, ElmoOptions
from spacy_elmo.formats.weights import bilm_from_bytes
folder, cases = Path(sys.argv[1]), json.loads(sys.argv[2])
weights = Path(sys.argv[3])
for name, edit in cases.items():
    data = json.loads(Path(sys.argv[4]).read_text())
    for section, values in edit.items():
        data[section].update(values)
    (folder / f"{name}.json").write_text(json.dumps(data))
    loads = {
        "file": lambda: ElmoEmbedder(folder / f"{name}.json", weights),
        "bytes": lambda: bilm_from_bytes(ElmoOptions.from_dict(data, source=name), weights.read_bytes()),
    }
    for way, load in loads.items():
        try:
            load()
            found = ("loaded", "")
        except BaseException as err:
            found = (type(err).__name__, str(err))
        print(json.dumps([name, way, *found]), flush=True)
"""


@pytest.fixture(scope="module")
def misfit_loads(tmp_path_factory):
    """{(case, way): (error class name, message)} from one subprocess loading every misfit."""
    folder = tmp_path_factory.mktemp("misfits")
    cases = json.dumps({name: edit for name, (edit, _, _) in MISFITS.items()})
    command = [sys.executable, "-c", _LOAD_MISFITS, str(folder), cases, str(ALLENNLP / "lm_weights.hdf5"),
               str(ALLENNLP / "options.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    return {(name, way): (kind, message) for name, way, kind, message in map(json.loads, done.stdout.splitlines())}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(MISFITS))
@pytest.mark.parametrize("way", ["file", "bytes"])
def test_options_that_cannot_fit_are_refused_before_allocating(misfit_loads, case, way):
    """Under a 3 GiB memory limit each misfit is refused with the error and setting of MISFITS, naming the file."""
    _, kind, says = MISFITS[case]
    found_kind, message = misfit_loads[case, way]
    assert (found_kind, says in message) == (kind, True), message
    if kind == "ElmoWeightsError":
        named = "ELMo weight file " + (str(ALLENNLP / "lm_weights.hdf5") if way == "file" else "<in-memory weights>")
    else:
        named = f"/{case}.json: " if way == "file" else f"{case}: "
    assert named in message and "\n" not in message


@pytest.mark.parametrize("case", ["filters", "projection_dim"])
def test_a_misfit_names_the_setting_the_options_value_and_the_weights(allennlp_files, case):
    edit, _, says = MISFITS[case]
    data = ElmoOptions.from_file(allennlp_files[0]).to_dict()
    for section, values in edit.items():
        data[section].update(values)
    with pytest.raises(ElmoWeightsError) as err:
        load_bilm(ElmoOptions.from_dict(data), allennlp_files[1])
    assert says in str(err.value)


def test_write_weights_refuses_an_unknown_dtype(allennlp_files):
    with pytest.raises(ElmoWeightsError, match="'float32' or 'float16', not 'int8'"):
        weights_to_bytes(load_files(*allennlp_files), dtype="int8")
