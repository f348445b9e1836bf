"""Fixtures of the pipeline tests: blank English pipelines with the tiny reference biLM, a tagger that listens to
it on three tagged sentences, and a CoNLL-2003 slice."""
from pathlib import Path
from typing import List, Tuple

import pytest
import spacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

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


TAGGER = {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1"}}}
TRAIN = [
    ("The cat sat on the mat .", "DT NN VBD IN DT NN ."),
    ("Dogs bark at night .", "NNS VBP IN NN ."),
    ("She reads a long book .", "PRP VBZ DT JJ NN ."),
]
PROBES = ["A dog sat on the book .", "Night falls .", "She sat ."]


def tagger_pipeline(taggers=("tagger",), **elmo_overrides) -> Language:
    """``elmo`` with every store_* setting off, then listening taggers, initialized on :data:`TRAIN`."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(store_vectors=False, **elmo_overrides))
    for name in taggers:
        nlp.add_pipe("tagger", name=name, config=TAGGER)
    nlp.initialize(lambda: examples(nlp))
    return nlp


def examples(nlp: Language) -> List[Example]:
    """:data:`TRAIN` as Examples of ``nlp``'s vocabulary."""
    return [
        Example(Doc(nlp.vocab, words=text.split()), Doc(nlp.vocab, words=text.split(), tags=tags.split()))
        for text, tags in TRAIN
    ]


def train_losses(nlp: Language, steps: int, **update_kwargs) -> List[float]:
    """The tagger's loss after each of ``steps`` updates on :data:`TRAIN` with Adam(0.01)."""
    optimizer = Adam(0.01)
    train = examples(nlp)
    return [nlp.update(train, sgd=optimizer, **update_kwargs)["tagger"] for _ in range(steps)]


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
