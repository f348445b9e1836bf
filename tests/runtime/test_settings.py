"""The settings' one declaration: every place that takes settings takes those the table gives it, with its defaults."""
import dataclasses
import inspect
from typing import Any, Callable, Dict

import pytest
from spacy.language import Language
from spacy.util import registry
from typer.main import get_command

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
