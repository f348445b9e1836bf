import json
import re

import pytest

from spacy_elmo import ElmoEmbedder
from spacy_elmo.errors import ElmoOptionsError
from spacy_elmo.model.options import ElmoOptions, preset
from tests.conftest import ALLENNLP


def test_fixture_options_read_and_round_trip(tmp_path):
    options = ElmoOptions.from_file(ALLENNLP / "options.json")
    assert (options.lstm_dim, options.projection_dim, options.n_highway, options.n_filters) == (64, 16, 2, 124)
    options.to_file(tmp_path / "o.json")
    assert json.loads((tmp_path / "o.json").read_text()) == json.loads((ALLENNLP / "options.json").read_text())


def test_extra_keys_are_kept():
    data = preset("small").to_dict()
    data["lstm"]["dropout"] = 0.1
    data["n_tokens_vocab"] = 793471
    assert ElmoOptions.from_dict(data).to_dict() == data


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: d["char_cnn"].update(activation="gelu"), "activation"),
        (lambda d: d["lstm"].pop("projection_dim"), "projection_dim"),
        (lambda d: d["lstm"].update(dim="big"), "'dim' must be int"),
        (lambda d: d["char_cnn"].update(filters=[[1]]), "filters"),
        (lambda d: d.pop("char_cnn"), "char_cnn"),
        (lambda d: d["char_cnn"].update(n_characters=300), "n_characters"),
    ],
)
def test_bad_options_name_the_key(edit, message):
    data = preset("small").to_dict()
    edit(data)
    with pytest.raises(ElmoOptionsError, match=message):
        ElmoOptions.from_dict(data, source="my_options.json")


def test_missing_and_invalid_json_files(tmp_path):
    with pytest.raises(ElmoOptionsError, match="not found"):
        ElmoOptions.from_file(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ElmoOptionsError, match="bad.json.*not valid JSON"):
        ElmoOptions.from_file(tmp_path / "bad.json")


def test_weights_file_given_as_options_names_the_file():
    """The files swapped: the .hdf5 (binary, not UTF-8) read as options.json is an ElmoOptionsError, not a decode error."""
    weights = ALLENNLP / "lm_weights.hdf5"
    with pytest.raises(ElmoOptionsError, match=re.escape(str(weights)) + ".*not UTF-8 text"):
        ElmoOptions.from_file(weights)
    with pytest.raises(ElmoOptionsError, match="not UTF-8 text"):
        ElmoEmbedder(weights, ALLENNLP / "options.json")


def test_unknown_preset():
    with pytest.raises(ElmoOptionsError, match="Unknown ELMo preset"):
        preset("huge")
