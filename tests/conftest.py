"""Shared fixtures: the reference ELMo test files bundled in tests/fixtures, and the research-only data sets.

The reference fixtures (Apache-2.0) are in the repository, so the tests run from a plain clone. The research-only
data sets (CoNLL-2003, SST, Weibo NER) never are: tests that need them read ``../shared/data`` beside the
checkout and skip, naming the folder, when it is absent. ``SPACY_ELMO_REQUIRE_SHARED=1`` (set by ``.ci/run``)
turns those skips into failures, so that CI cannot pass by skipping.
"""
import os
from pathlib import Path

import pytest
import torch

# The test models are tiny: one thread is faster for them, and avoids threads spinning against each other.
torch.set_num_threads(1)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "elmo"
ALLENNLP = FIXTURE / "allennlp"
BILM_TF = FIXTURE / "bilm-tf" / "model"
REQUIRE_SHARED_VAR = "SPACY_ELMO_REQUIRE_SHARED"


def shared_data(name: str) -> Path:
    """The folder ``../shared/data/<name>`` of a data set that is not in the repository; skip if it is absent.

    With ``SPACY_ELMO_REQUIRE_SHARED=1`` a missing folder fails the test instead.
    """
    folder = SHARED / "data" / name
    if not folder.is_dir():
        reason = f"data set not in the repository and not found at {folder} (put ../shared beside the checkout)"
        if os.environ.get(REQUIRE_SHARED_VAR) == "1":
            pytest.fail(f"{reason}; {REQUIRE_SHARED_VAR}=1 requires it")
        pytest.skip(reason)
    return folder


@pytest.fixture(scope="session")
def allennlp_files():
    return ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"


@pytest.fixture(scope="session")
def bilm_tf_files():
    return BILM_TF / "options.json", BILM_TF / "lm_weights.hdf5"
