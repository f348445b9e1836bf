"""A tiny pretraining setup on bilm-tf's own training fixture (4 lines of text)."""
from pathlib import Path

import pytest
from confection import Config

from spacy_elmo.pretrain.config import default_config
from tests.conftest import FIXTURE

TRAIN_TEXT = FIXTURE / "bilm-tf" / "train" / "data.txt"


def tiny_config(max_steps: int, **training) -> Config:
    """A small biLM that trains in seconds; ``training`` overrides keys of [training]."""
    config = default_config("tiny")
    config["paths"]["train"] = str(TRAIN_TEXT)
    config["paths"]["dev"] = str(TRAIN_TEXT)
    config["model"].update(lstm_dim=64, projection_dim=16, filters=[[1, 8], [2, 8], [3, 16]], char_embedding_dim=8)
    config["corpus"].update(max_sentence_tokens=40)
    config["training"].update(
        max_steps=max_steps, batch_tokens=120, eval_every=1000, checkpoint_every=5, log_every=5, threads=1,
        learn_rate=0.2, seed=3, bf16=False,
    )
    config["training"].update(training)
    return config


@pytest.fixture
def write_config(tmp_path):
    def write(max_steps: int, **training) -> Path:
        path = tmp_path / "pretrain.cfg"
        tiny_config(max_steps, **training).to_disk(path)
        return path

    return write
