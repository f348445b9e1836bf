"""Config mistakes are config errors: ``spacy debug config`` and ``spacy train`` stop with spaCy's config error block
(no traceback) naming the setting, and ``nlp.add_pipe`` raises ConfigValidationError."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from confection import ConfigValidationError
from spacy.tokens import DocBin

from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.pipeline import ElmoComponent
from spacy_elmo.pipeline.config_types import SettingType, setting_type
from spacy_elmo.sources.download import MANIFEST
from spacy_elmo.sources.resolve import check_model_source

from tests.pipeline.conftest import OPTIONS, WEIGHTS, elmo_config, examples

TAGGER = Path(__file__).resolve().parents[2] / "spacy_elmo" / "pipeline" / "configs" / "tagger.cfg"

# (override, value, what the error must say): each is refused before anything is built or read.
MISTAKES = [
    ("components.elmo.mix", "avrage", "elmo -> mix"),
    ("components.elmo.mix", "[]", "elmo -> mix"),
    ("components.elmo.model.cache_size", "-1", "elmo.model -> cache_size"),
    ("components.elmo.model.max_batch_tokens", "0", "elmo.model -> max_batch_tokens"),
    ("paths.elmo_options", "orignal", "'orignal' is not an options.json file"),  # an unknown name
    ("paths.elmo_options", "original", "'original' is not an options.json file"),  # not downloaded
]


@pytest.mark.parametrize("command", ["debug config", "train"])
@pytest.mark.parametrize("override, value, expected", MISTAKES)
def test_a_config_mistake_stops_spacy_with_a_config_error(command, override, value, expected, tmp_path):
    env = {**os.environ, "SPACY_ELMO_CACHE": str(tmp_path / "empty-cache")}
    done = subprocess.run(
        [sys.executable, "-m", "spacy", *command.split(), str(TAGGER), f"--{override}", value, "--paths.train",
         str(tmp_path / "train.spacy"), "--paths.dev", str(tmp_path / "dev.spacy"),
         *(["--output", str(tmp_path / "out")] if command == "train" else [])],
        capture_output=True, text=True, env=env, timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Config error for" in output and expected in output, output
    assert "Traceback" not in output, output
    if override == "paths.elmo_options":
        assert "python -m spacy_elmo download NAME" in output and "--from" in output


def test_add_pipe_refuses_an_unknown_mix_name():
    with pytest.raises(ConfigValidationError, match=r"mix\s+at root: 'avrage' is not"):
        spacy.blank("en").add_pipe("elmo", config=elmo_config(mix="avrage"))


@pytest.mark.parametrize("mix", [[], ["a", "b", "c"], [True, 0.5, 0.5], {"top": 1}])
def test_add_pipe_refuses_a_mix_that_is_no_list_of_weights(mix):
    with pytest.raises(ConfigValidationError, match=r"mix\s+at root: .* is not 'top', 'average' or a list of one weight"):
        spacy.blank("en").add_pipe("elmo", config=elmo_config(mix=mix))


def test_add_pipe_takes_a_list_of_one_weight_per_layer():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(mix=[0.5, 0.25, 0.25]))
    assert nlp("A cat .")._.elmo.shape[0] == 3


def test_a_downloaded_name_passes_and_a_path_passes_even_where_missing(tmp_path, monkeypatch):
    """A saved pipeline names the files it was trained from, which need not exist where it is loaded."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / MANIFEST).write_text("{}", encoding="utf-8")
    for accepted in (None, OPTIONS, "small", str(tmp_path / "gone" / "options.json"), "options.json"):
        check_model_source(accepted)


def test_a_setting_type_prints_as_what_it_accepts_and_passes_the_values_its_check_passes():
    def even(value):
        if value % 2:
            raise ElmoSettingsError(f"odd: {value}")

    Even = setting_type("Even", "an even number", even)
    assert isinstance(Even, SettingType) and repr(Even) == "an even number"
    assert Even.validate(4) == 4
    with pytest.raises(ValueError, match="odd: 3"):
        Even.validate(3)


def _listening_tagger(upstream: str = "*", with_elmo: bool = True, **elmo_settings) -> spacy.Language:
    nlp = spacy.blank("en")
    if with_elmo:
        nlp.add_pipe("elmo", config=elmo_config(store_vectors=False, **elmo_settings))
    listener = {"@architectures": "spacy_elmo.ElmoListener.v1", "upstream": upstream}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": listener}})
    return nlp


# (what is wrong, the pipeline, what the error must say)
INITIALIZE_MISTAKES = {
    "an upstream no component answers": (dict(upstream="elmoo"), 'upstream = "elmoo": no \'elmo\' component of that name'),
    "no elmo component": (dict(with_elmo=False), 'add "elmo" there, before the component that listens'),
    "a mix of 2 weights for 3 layers": (dict(mix=[0.5, 0.5]), "components.elmo.mix: mix gives 2 weights, but this biLM has 3 layers"),
}


@pytest.mark.parametrize("mistake", INITIALIZE_MISTAKES)
def test_initialize_refuses_a_listener_without_elmo_or_a_mix_that_does_not_fit_as_a_config_error(mistake):
    settings, expected = INITIALIZE_MISTAKES[mistake]
    nlp = _listening_tagger(**settings)
    with pytest.raises(ConfigValidationError) as caught:
        nlp.initialize(lambda: examples(nlp))
    assert isinstance(caught.value, ElmoSettingsError)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_listener_of_a_named_elmo_component_and_a_mix_of_one_weight_per_layer_initialize():
    nlp = _listening_tagger(upstream="elmo", mix=[0.2, 0.3, 0.5])
    nlp.initialize(lambda: examples(nlp))
    assert nlp("A cat sat .")._.elmo is None  # store_vectors is off; the tagger runs on the listener
    assert len(nlp("A cat sat .")) == 4


@pytest.fixture(scope="module")
def tagged_corpus(tmp_path_factory) -> Path:
    nlp = spacy.blank("en")
    path = tmp_path_factory.mktemp("corpus") / "train.spacy"
    DocBin(docs=[example.reference for example in examples(nlp)]).to_disk(path)
    return path


# spaCy's command-line overrides of tagger.cfg (upstream = "elmo") that make each mistake
TRAIN_MISTAKES = {
    "an upstream no component answers": (["--components.tagger.model.tok2vec.upstream", "elmoo"], 'upstream = "elmoo"'),
    "no elmo component": (["--nlp.pipeline", '["tok2vec", "tagger"]'], 'add "elmo" there'),
    "a mix of 2 weights for 3 layers": (["--components.elmo.mix", "[0.5, 0.5]"], "components.elmo.mix: mix gives 2 weights"),
}


@pytest.mark.slow
@pytest.mark.parametrize("mistake", TRAIN_MISTAKES)
def test_spacy_train_stops_at_initialize_with_one_line_naming_the_setting(mistake, tagged_corpus, tmp_path):
    overrides, expected = TRAIN_MISTAKES[mistake]
    done = subprocess.run(
        [sys.executable, "-m", "spacy", "train", str(TAGGER), "--output", str(tmp_path / "out"), "--paths.train",
         str(tagged_corpus), "--paths.dev", str(tagged_corpus), "--paths.elmo_options", OPTIONS, "--paths.elmo_weights",
         WEIGHTS, *overrides],
        capture_output=True, text=True, timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    assert output.count("✘") == 1 and expected in " ".join(output.split("✘")[1].split()), output  # spaCy wraps at 80
    assert "Training pipeline" not in output and not (tmp_path / "out" / "model-last").exists()


# (a setting given to the component that it does not take, what the one-line error must say)
UNKNOWN_SETTINGS = [
    ("precison", "did you mean 'precision'? It belongs in [components.elmo.model] (spacy_elmo.ElmoBiLm.v2)"),
    ("precision", "'precision' is a setting of the biLM, not of the 'elmo' component: it belongs in [components.elmo.model]"),
    ("batch_wait", "did you mean 'batch_wait_ms'? It belongs in [components.elmo]"),
    ("colour", "Unknown setting 'colour' for the 'elmo' component; it takes mix, "),
]


@pytest.mark.parametrize("key, expected", UNKNOWN_SETTINGS)
def test_a_setting_the_component_does_not_take_is_one_line_saying_where_it_belongs(key, expected):
    model = spacy.registry.resolve({"model": elmo_config()["model"]})["model"]
    with pytest.raises(ConfigValidationError) as caught:
        ElmoComponent(spacy.blank("en").vocab, model, **{key: "bf16"})
    assert isinstance(caught.value, ElmoSettingsError)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("key", ["precison", "precision"])
def test_add_pipe_refuses_a_key_the_factory_does_not_take_before_building_anything(key):
    """confection (spaCy 3.8's config system) checks a factory's keys against its signature before calling it, with
    no hook for a factory's own message: the component never sees such a key, so it must at least be refused, by
    name, before anything is built, and not ignored."""
    with pytest.raises(ConfigValidationError, match=rf"elmo -> {key}\s+unexpected argument: '{key}'"):
        spacy.blank("en").add_pipe("elmo", config={key: "bf16"})
