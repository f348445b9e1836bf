import json
import re

import pytest

from spacy_elmo import ElmoEmbedder
from spacy_elmo.errors import ElmoOptionsError
from spacy_elmo.formats.manylangs import PUBLISHED_ARCHITECTURE, convert_options
from spacy_elmo.model.options import PUBLISHED_FILTERS, ElmoOptions, preset
from spacy_elmo.sources.catalog import CATALOG, ModelEntry
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
        (lambda d: d["lstm"].update(cell_clip=float("nan")), "cell_clip must be a non-negative finite number"),
        (lambda d: d["lstm"].update(dim=16385), r"lstm.dim is 16385, above the 16384 this package accepts"),
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


def test_sizes_beyond_the_limits_are_refused_however_options_are_made():
    """Options built in code (as pretraining's config builds them) are bounded as those read from a file."""
    with pytest.raises(ElmoOptionsError, match="lstm.n_layers is 1000000, above the 16"):
        ElmoOptions(lstm_dim=64, projection_dim=16, n_layers=1000000)


def _published_options(entry: ModelEntry) -> ElmoOptions:
    """Options with the architecture ``entry`` states, as its publisher's options.json has it."""
    if entry.kind == "manylangs":
        specials = {"begin_of_word": "<eow>", "end_of_word": "<bow>", "padding": "<pad>", "unknown": "<oov>",
                    "begin_of_sentence": "<bos>", "end_of_sentence": "<eos>"}
        word_specials = {key: specials[key] for key in ("unknown", "begin_of_sentence", "end_of_sentence")}
        chars = {"entries": [*specials.values(), "a"], **specials}
        words = {"entries": [*word_specials.values(), "a"], **word_specials}
        return convert_options(PUBLISHED_ARCHITECTURE, chars, words)
    sizes = entry.architecture
    return ElmoOptions.from_dict({
        "lstm": {"dim": sizes["lstm_dim"], "projection_dim": sizes["projection_dim"], "n_layers": sizes["n_layers"],
                 "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
        "char_cnn": {"embedding": {"dim": 16}, "filters": [list(f) for f in PUBLISHED_FILTERS],
                     "n_highway": sizes["n_highway"], "n_characters": 262, "max_characters_per_token": 50,
                     "activation": "relu"},
    })


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_published_architecture_is_within_the_limits(name):
    entry = CATALOG[name]
    options = _published_options(entry)
    assert {key: getattr(options, key) for key in entry.architecture} == entry.architecture
