"""Every entry point runs the biLM through the runtime, with its settings: the thread count, the batch budget, the
precision and the device apply to each run, whichever class or command asked for it."""
import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.allennlp import Elmo, ElmoEmbedder as AllenNlpEmbedder, batch_to_ids

from tests.conftest import ALLENNLP
from tests.pipeline.conftest import elmo_config
from tests.runtime.test_runtime import record_bilm_runs

OPTIONS, WEIGHTS = ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"
BUDGET = 24  # padded tokens: the sentences below run in several batches
THREADS = 2  # neither torch's count in the tests (1) nor the default
SENTENCES = [s.split() for s in ["The cat sat on the mat .", "Dogs bark .", "A long day ends at night .", "Yes", "It rains"]]
SETTINGS = {"threads": THREADS, "max_batch_tokens": BUDGET, "device": "cpu"}


def _embedder(precision):
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, precision=precision, **SETTINGS)
    return embedder.runtime, lambda: embedder.embed_batch(SENTENCES)


def _component(precision):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(threads=THREADS, max_batch_tokens=BUDGET, precision=precision))
    return nlp.get_pipe("elmo").runtime, lambda: list(nlp.pipe(" ".join(s) for s in SENTENCES))


def _fine_tuning(precision):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(threads=THREADS, max_batch_tokens=BUDGET, precision=precision, frozen=False))
    model = nlp.get_pipe("elmo").model

    def step():
        layers, backprop = model.begin_update([nlp.make_doc(" ".join(s)) for s in SENTENCES])
        backprop([np.ones_like(x) for x in layers])

    return nlp.get_pipe("elmo").runtime, step


def _allennlp_elmo(precision):
    elmo = Elmo(OPTIONS, WEIGHTS, 1, precision=precision, **SETTINGS)
    return elmo._elmo_lstm.runtime, lambda: elmo(batch_to_ids(SENTENCES))


def _allennlp_embedder(precision):
    embedder = AllenNlpEmbedder(OPTIONS, WEIGHTS, cuda_device=-1, precision=precision, threads=THREADS, max_batch_tokens=BUDGET)
    return embedder.elmo_bilm.runtime, lambda: embedder.embed_batch(SENTENCES)


ENTRY_POINTS = {
    "ElmoEmbedder": (_embedder, "int8"),
    "elmo component": (_component, "int8"),
    "fine-tuning": (_fine_tuning, "fp32"),  # fine-tuning trains fp32 weights
    "allennlp.Elmo": (_allennlp_elmo, "int8"),
    "allennlp.ElmoEmbedder": (_allennlp_embedder, "int8"),
}


@pytest.fixture
def restored_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_each_entry_point_runs_the_biLM_with_its_threads_budget_precision_and_device(entry, monkeypatch, restored_threads):
    make, precision = ENTRY_POINTS[entry]
    runtime, call = make(precision)
    runs = record_bilm_runs(monkeypatch)
    call()
    assert len(runs) > 1 and all(padded <= BUDGET and threads == THREADS for _, padded, threads in runs), runs
    assert runtime.encoder.bilm.precision == precision and runtime.device == torch.device("cpu")
