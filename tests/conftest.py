"""Shared fixtures: paths of the reference implementations' ELMo test files under ../shared."""
from pathlib import Path

import pytest
import torch

# The test models are tiny: one thread is faster for them, and avoids threads spinning against each other.
torch.set_num_threads(1)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURE = SHARED / "data" / "elmo_fixture"
ALLENNLP = FIXTURE / "allennlp"
BILM_TF = FIXTURE / "bilm-tf" / "model"


def _require(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"Test data missing: {path} (the tests expect ../shared beside the repository)")
    return path


@pytest.fixture(scope="session")
def allennlp_files():
    return _require(ALLENNLP / "options.json"), _require(ALLENNLP / "lm_weights.hdf5")


@pytest.fixture(scope="session")
def bilm_tf_files():
    return _require(BILM_TF / "options.json"), _require(BILM_TF / "lm_weights.hdf5")
