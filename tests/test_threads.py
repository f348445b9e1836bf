"""The ``threads`` setting: torch's thread count during the biLM's calls only, restored after, 1 by default;
and one embedder or pipeline used from several Python threads at once."""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import spacy
import torch

import spacy_elmo.pipeline.component as component_module
from spacy_elmo import ElmoEmbedder
from spacy_elmo.util.threads import torch_threads

from tests.conftest import ALLENNLP
from tests.pipeline.conftest import elmo_config

OUTSIDE = 3  # the process's own setting in these tests: neither the default 1 nor a value the tests ask for


@pytest.fixture
def process_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(OUTSIDE)
    yield
    torch.set_num_threads(before)


def test_torch_threads_sets_and_restores(process_threads):
    with torch_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == OUTSIDE
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("restored on errors too")
    assert torch.get_num_threads() == OUTSIDE
    with torch_threads(None):
        assert torch.get_num_threads() == OUTSIDE


@pytest.mark.parametrize("settings, during", [({}, 1), ({"threads": 2}, 2), ({"threads": None}, OUTSIDE)])
def test_embedder_uses_its_threads_only_while_embedding(process_threads, allennlp_files, monkeypatch, settings, during):
    """No ``threads`` argument: the default, 1; ``None``: torch's own setting."""
    embedder = ElmoEmbedder(*allennlp_files, **settings)
    seen = []
    embed = embedder._batches.forward
    monkeypatch.setattr(embedder._batches, "forward", lambda *a: seen.append(torch.get_num_threads()) or embed(*a))
    embedder.embed_sentence(["The", "cat", "sat"])
    assert seen == [during] and torch.get_num_threads() == OUTSIDE


@pytest.mark.parametrize("threads, during", [(None, 1), (2, 2), ("null", OUTSIDE)])
def test_component_uses_its_threads_only_while_predicting(process_threads, monkeypatch, threads, during):
    """``None`` here: the setting left out of the config (default 1); ``"null"``: keep torch's own setting."""
    nlp = spacy.blank("en")
    config = elmo_config() if threads is None else elmo_config(threads=None if threads == "null" else threads)
    nlp.add_pipe("elmo", config=config)
    seen = []
    mix_docs = component_module.mix_docs
    monkeypatch.setattr(component_module, "mix_docs", lambda *a: seen.append(torch.get_num_threads()) or mix_docs(*a))
    docs = list(nlp.pipe(["The cat sat .", "It was happy ."]))
    assert seen == [during] and torch.get_num_threads() == OUTSIDE
    assert all(doc._.elmo.shape == (4, 32) for doc in docs)


def test_thread_count_does_not_change_the_vectors(allennlp_files):
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["ELMo", "helps"]]
    one = ElmoEmbedder(*allennlp_files).embed_batch(sentences)
    two = ElmoEmbedder(*allennlp_files, threads=2).embed_batch(sentences)
    for a, b in zip(one, two):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_are_refused(allennlp_files, bad):
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        ElmoEmbedder(*allennlp_files, threads=bad)


def _thread_sentences(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    return [[words[j] for j in rng.integers(0, len(words), rng.integers(1, 25))] for _ in range(n)]


def _in_threads(work, inputs: list, n_threads: int = 8) -> list:
    """``work(x)`` for every input, all started together from ``n_threads`` Python threads."""
    barrier = threading.Barrier(n_threads)

    def run(chunk):
        barrier.wait()
        return [work(x) for x in chunk]

    chunks = [inputs[i::n_threads] for i in range(n_threads)]
    with ThreadPoolExecutor(n_threads) as pool:
        results = list(pool.map(run, chunks))
    out = [None] * len(inputs)
    for i, chunk_results in enumerate(results):
        out[i::n_threads] = chunk_results
    return out


@pytest.mark.parametrize("cache_size", [0, 200])
def test_one_embedder_shared_by_8_threads_gives_the_serial_vectors(allennlp_files, cache_size):
    """Five rounds, each with a fresh embedder, so that the cache fills while the threads race, five times."""
    sentences = _thread_sentences(160, seed=7)
    serial = ElmoEmbedder(*allennlp_files).embed_batch(sentences)
    for _ in range(5):
        shared = ElmoEmbedder(*allennlp_files, cache_size=cache_size)
        threaded = _in_threads(shared.embed_sentence, sentences)
        for a, b in zip(serial, threaded):
            np.testing.assert_allclose(b, a, atol=1e-6, rtol=0)
        assert cache_size == 0 or len(shared.encoder.cache) == cache_size


@pytest.mark.parametrize("cache_size", [0, 200])
def test_one_pipeline_shared_by_8_threads_gives_the_serial_vectors(cache_size):
    texts = [" ".join(s) for s in _thread_sentences(160, seed=8)]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(cache_size=cache_size))
    reference = spacy.blank("en")
    reference.add_pipe("elmo", config=elmo_config(cache_size=0))
    serial = [reference(text)._.elmo for text in texts]
    threaded = _in_threads(lambda text: nlp(text)._.elmo, texts)
    for a, b in zip(serial, threaded):
        np.testing.assert_allclose(b, a, atol=1e-6, rtol=0)
    assert torch.get_num_threads() == 1  # torch_threads restored the conftest's setting after the threads
