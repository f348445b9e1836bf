"""Config mistakes are config errors: ``spacy debug config`` and ``spacy train`` stop with spaCy's config error block
(no traceback) naming the setting, and ``nlp.add_pipe`` raises ConfigValidationError."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from confection import ConfigValidationError

from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.pipeline.config_types import SettingType, setting_type
from spacy_elmo.sources.download import MANIFEST
from spacy_elmo.sources.resolve import check_model_source

from tests.pipeline.conftest import OPTIONS, elmo_config

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
