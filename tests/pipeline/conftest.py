"""Fixtures of the pipeline tests: blank English pipelines with the tiny reference biLM, and a CoNLL-2003 slice."""
from pathlib import Path
from typing import List, Tuple

import pytest
import spacy
from spacy.language import Language

from spacy_elmo.pipeline.architectures import ARCHITECTURE, BILM_SETTINGS

from tests.conftest import ALLENNLP, shared_data

OPTIONS, WEIGHTS = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")


def elmo_config(**overrides) -> dict:
    """The ``elmo`` config of the tests: the reference fixture weights, zero initial state.

    ``overrides`` are component settings, or biLM settings (those of ``ElmoBiLm.v2``), which go into ``model``.
    """
    bilm = {key: overrides.pop(key) for key in list(overrides) if key in BILM_SETTINGS}
    model = {"@architectures": ARCHITECTURE, "options_file": OPTIONS, "weight_file": WEIGHTS, "initial_state": "zeros"}
    return {"model": {**model, **bilm}, **overrides}


def make_nlp(**overrides) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(**overrides))
    return nlp


def conll_train() -> Path:
    """CoNLL-2003's training file (research-only: read from ../shared, the test skips without it)."""
    return shared_data("conll2003") / "train.txt"


def read_conll(path: Path, n_sentences: int) -> List[List[Tuple[str, str]]]:
    """The first ``n_sentences`` sentences of a CoNLL-2003 file as (word, NER tag) pairs."""
    sentences, current = [], []
    with path.open(encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] != "-DOCSTART-":
                current.append((fields[0], fields[-1]))
            elif current:
                sentences.append(current)
                current = []
                if len(sentences) == n_sentences:
                    break
    return sentences


@pytest.fixture
def nlp() -> Language:
    return make_nlp()


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread():
    """The tiny test biLM is dominated by per-op thread hand-offs on a busy machine; one thread is faster."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
