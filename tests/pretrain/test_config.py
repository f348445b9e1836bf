import pytest

from spacy_elmo.model.options import preset
from spacy_elmo.pretrain.config import PretrainConfigError, default_config, load_config


@pytest.mark.parametrize("name", ["tiny", "small", "medium", "original"])
def test_presets_validate_and_give_the_published_architecture(name, tmp_path):
    config = default_config(name)
    config["paths"]["train"] = "corpus.txt"
    typed, _ = load_config(config)
    assert typed.options() == preset(name)


def test_overrides_apply(tmp_path):
    path = tmp_path / "c.cfg"
    default_config("tiny").to_disk(path)
    typed, _ = load_config(path, {"paths.train": "x.txt", "training.max_steps": 7})
    assert typed.corpus.train == "x.txt" and typed.training.max_steps == 7


def test_unknown_key_and_bad_value_are_named(tmp_path):
    config = default_config("tiny")
    config["paths"]["train"] = "x.txt"
    config["training"]["learning_rate"] = 0.1
    with pytest.raises(PretrainConfigError, match=r"\[training.learning_rate\]"):
        load_config(config)
    config = default_config("tiny")
    config["paths"]["train"] = "x.txt"
    config["training"]["optimizer"] = "lion"
    with pytest.raises(PretrainConfigError, match="optimizer"):
        load_config(config)


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("training", "eval_every", 0, "greater than 0"),  # was a ZeroDivisionError after the first step
        ("training", "batch_tokens", -1, "greater than 0"),
        ("training", "max_tokens", 0, "greater than 0"),
        ("training", "dropout", 1.0, "less than 1"),
        ("corpus", "max_sentence_tokens", 0, "greater than 0"),
        ("objective", "cutoffs", [2000, -1], "greater than 0"),
    ],
)
def test_sizes_and_intervals_out_of_range_are_named_before_anything_runs(section, key, value, message):
    config = default_config("tiny")
    config["paths"]["train"] = "x.txt"
    config[section][key] = value
    with pytest.raises(PretrainConfigError, match=rf"\[{section}\.{key}[^ ]*\] Input should be {message}"):
        load_config(config)


def test_missing_training_data_says_how_to_give_it():
    with pytest.raises(PretrainConfigError, match="--paths.train"):
        load_config(default_config("tiny"))
