"""The settings' one declaration: every place that takes settings takes those the table gives it, with its defaults,
and a setting is checked once on each path into a runtime."""
import dataclasses
import inspect
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import spacy
from spacy.language import Language
from spacy.util import registry
from typer.main import get_command
from typer.testing import CliRunner

import spacy_elmo.commands.embed  # noqa: F401 (imported here: its defaults are made on import, not on the path)
import spacy_elmo.model.precision as precision_module
from spacy_elmo import ElmoEmbedder
from spacy_elmo.allennlp import Elmo
from spacy_elmo.commands.cli import app
from spacy_elmo.pipeline.component import make_elmo
from spacy_elmo.runtime.settings import (
    ALLENNLP,
    BILM_BLOCK,
    COMPONENT,
    EMBED,
    EMBEDDER,
    EMBEDDING,
    DEFAULTS,
    PIPELINE_DEFAULTS,
    PLACES,
    BiLmSettings,
    embed_options,
    settings_in,
)

from tests.conftest import ALLENNLP as ALLENNLP_FILES

SETTINGS = {item.name for item in dataclasses.fields(BiLmSettings)}


def _parameters(function: Callable) -> Dict[str, Any]:
    """The keywords of ``function`` that are settings, with their defaults."""
    parameters = inspect.signature(function).parameters
    return {name: parameter.default for name, parameter in parameters.items() if name in SETTINGS}


def _defaults(place: str, defaults: BiLmSettings = DEFAULTS) -> Dict[str, Any]:
    return {name: getattr(defaults, name) for name in settings_in(place)}


def test_every_setting_is_taken_somewhere_and_only_at_known_places():
    for item in dataclasses.fields(BiLmSettings):
        assert item.metadata["places"] and set(item.metadata["places"]) <= set(PLACES), item.name


@pytest.mark.parametrize(
    "place, function, defaults",
    [
        (BILM_BLOCK, lambda: registry.get("architectures", "spacy_elmo.ElmoBiLm.v2"), PIPELINE_DEFAULTS),
        (EMBEDDING, lambda: registry.get("architectures", "spacy_elmo.ElmoEmbedding.v2"), DEFAULTS),
        (EMBEDDER, lambda: ElmoEmbedder.__init__, DEFAULTS),
    ],
)
def test_a_signature_takes_the_settings_of_its_place_with_their_defaults(place, function, defaults):
    assert _parameters(function()) == _defaults(place, defaults)


def test_the_elmo_factory_takes_the_component_settings_with_their_defaults():
    meta = Language.get_factory_meta("elmo")
    assert {key: value for key, value in meta.default_config.items() if key in SETTINGS} == _defaults(COMPONENT)
    assert set(_parameters(make_elmo)) == set(settings_in(COMPONENT))


def test_the_embed_command_takes_the_embed_settings_as_options_that_keep_their_defaults():
    """An option left out is None, which keeps the setting's default: the table's."""
    command = get_command(app).commands["embed"]
    options = {param.name: param for param in command.params if param.name in SETTINGS}
    assert set(options) == set(settings_in(EMBED)) == set(embed_options().values())
    for option, name in embed_options().items():
        assert option in options[name].opts and options[name].default is None, option


def test_the_allennlp_classes_take_their_extra_settings():
    elmo = Elmo(None, None, 1, **{name: getattr(DEFAULTS, name) for name in settings_in(ALLENNLP)})
    assert {name: getattr(elmo._elmo_lstm.settings, name) for name in settings_in(ALLENNLP)} == _defaults(ALLENNLP)


class CheckCounter:
    """Counts the calls of precision's checks made from outside their module: the name's
    (:func:`check_precision_name`) and the device's (:func:`check_precision`, which checks the name again inside)."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()
        self.counted = {
            precision_module.check_precision_name.__code__: "name",
            precision_module.check_precision.__code__: "device",
        }

    def __enter__(self) -> Counter:
        sys.setprofile(self._profile)
        return self.calls

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in self.counted and frame.f_back.f_code.co_filename != precision_module.__file__:
            self.calls[self.counted[frame.f_code]] += 1


def _embed_command(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    args = [str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--precision", "int8", "--whitespace", "--quiet"]
    assert CliRunner().invoke(app, ["embed", *args]).exit_code == 0


def _pipeline(tmp_path: Path) -> None:
    from spacy_elmo.pipeline.architectures import build_bilm_model_v2
    from spacy_elmo.pipeline.component import ElmoComponent

    vocab = spacy.blank("en").vocab
    ElmoComponent(vocab, build_bilm_model_v2(precision="int8")).runtime.layers([["The", "cat"]])


PATHS = {
    "embed command": _embed_command,
    "ElmoEmbedder": lambda tmp_path: ElmoEmbedder(precision="int8").embed_sentence(["The", "cat"]),
    "AllenNLP": lambda tmp_path: Elmo(str(ALLENNLP_FILES / "options.json"), str(ALLENNLP_FILES / "lm_weights.hdf5"), 1, precision="int8"),
    "pipeline": _pipeline,
}


@pytest.mark.parametrize("path", list(PATHS))
def test_precision_is_checked_once_by_name_and_once_against_the_device_on_each_path(path, tmp_path):
    with CheckCounter() as calls:
        PATHS[path](tmp_path)
    assert calls == {"name": 1, "device": 1}
