"""The ``threads`` setting: torch's thread count during the biLM's calls only, restored after, 1 by default;
and one embedder or pipeline used from several Python threads at once."""
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import spacy
import torch

import spacy_elmo.pipeline.component as component_module
from spacy_elmo import ElmoEmbedder
from spacy_elmo.util.threads import RequestBatcher, torch_threads

from tests.conftest import ALLENNLP, ROUNDING
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
        np.testing.assert_allclose(a, b, **ROUNDING)


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
            np.testing.assert_allclose(b, a, **ROUNDING)
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
        np.testing.assert_allclose(b, a, **ROUNDING)
    assert torch.get_num_threads() == 1  # torch_threads restored the conftest's setting after the threads


# --- calls from several threads merged into one biLM batch (RequestBatcher) ---

JOIN_TIMEOUT = 60  # seconds; a join that times out is the failure signal of a deadlock


def _start(work, inputs: list) -> tuple:
    """One thread per input running ``work(x)``; returns the threads and a dict input -> result or exception."""
    answers: dict = {}

    def call(x):
        try:
            answers[x] = work(x)
        except BaseException as err:  # noqa: BLE001 - the test inspects what each caller got
            answers[x] = err

    threads = [threading.Thread(target=call, args=(x,), daemon=True) for x in inputs]
    for thread in threads:
        thread.start()
    return threads, answers


def _join(threads: list) -> None:
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a caller is still waiting: deadlock"


def _wait_until(condition) -> None:
    for _ in range(6000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("timed out waiting for the threads to queue")


class _BlockingRun:
    """A batch function that records its inputs, blocks its first call until released, and can raise on an item."""

    def __init__(self, raise_on=None, interrupt_once: bool = False):
        self.calls, self.release = [], threading.Event()
        self.raise_on, self.interrupt_once = raise_on, interrupt_once

    def __call__(self, items: list) -> list:
        self.calls.append(list(items))
        if len(self.calls) == 1:
            self.release.wait(JOIN_TIMEOUT)
        elif self.interrupt_once:
            self.interrupt_once = False
            raise KeyboardInterrupt
        if self.raise_on in items:
            raise ValueError(f"bad item {self.raise_on}")
        return [x * 10 for x in items]


def _queue_behind_a_running_call(run: _BlockingRun, n_waiting: int):
    """Call 0 runs (and blocks); calls 1..n_waiting then queue behind it; returns the batcher, threads and answers."""
    batcher = RequestBatcher(run)
    first, answers = _start(lambda x: batcher([x])[0], [0])
    _wait_until(lambda: len(run.calls) == 1)
    rest, more = _start(lambda x: batcher([x])[0], list(range(1, n_waiting + 1)))
    _wait_until(lambda: len(batcher._queue) == n_waiting)
    run.release.set()
    _join(first + rest)
    return {**answers, **more}


def test_calls_arriving_during_a_batch_run_together_as_the_next_batch():
    run = _BlockingRun()
    answers = _queue_behind_a_running_call(run, 7)
    assert run.calls[0] == [0] and sorted(run.calls[1]) == list(range(1, 8)) and len(run.calls) == 2
    assert answers == {x: x * 10 for x in range(8)}


def test_an_error_in_a_merged_batch_reaches_only_the_caller_whose_input_raised():
    run = _BlockingRun(raise_on=3)
    answers = _queue_behind_a_running_call(run, 7)
    assert isinstance(answers.pop(3), ValueError)
    assert answers == {x: x * 10 for x in range(8) if x != 3}


def test_an_interrupted_leader_leaves_its_batch_to_the_waiting_threads():
    """The second batch's leader gets KeyboardInterrupt; the other calls of that batch are answered all the same."""
    run = _BlockingRun(interrupt_once=True)
    answers = _queue_behind_a_running_call(run, 7)
    interrupted = [x for x, answer in answers.items() if isinstance(answer, KeyboardInterrupt)]
    assert len(interrupted) == 1
    assert {x: a for x, a in answers.items() if x not in interrupted} == {x: x * 10 for x in range(8) if x not in interrupted}


# A wait far beyond JOIN_TIMEOUT: a call that waited it out would show as a deadlock.
LONG_WAIT_MS = 10 * JOIN_TIMEOUT * 1000


def test_with_batch_wait_ms_a_lone_caller_never_waits():
    run = _BlockingRun()
    run.release.set()
    batcher = RequestBatcher(run, wait_ms=LONG_WAIT_MS)
    callers, answers = _start(lambda xs: [batcher([x])[0] for x in xs], [(0, 1, 2)])
    _join(callers)
    assert answers == {(0, 1, 2): [0, 10, 20]} and run.calls == [[0], [1], [2]]


def test_after_a_merged_batch_the_next_leader_waits_for_as_many_calls_to_join():
    run = _BlockingRun()
    batcher = RequestBatcher(run, wait_ms=LONG_WAIT_MS)
    first, answers = _start(lambda x: batcher([x])[0], [0])
    _wait_until(lambda: len(run.calls) == 1)
    merged, more = _start(lambda x: batcher([x])[0], [1, 2, 3])
    _wait_until(lambda: len(batcher._queue) == 3)
    run.release.set()
    _join(first + merged)
    leader, late = _start(lambda x: batcher([x])[0], [4])
    _wait_until(lambda: batcher._leading)  # 4 leads, waiting for three calls as the batch before held
    joining, last = _start(lambda x: batcher([x])[0], [5, 6])
    _join(leader + joining)
    assert [sorted(c) for c in run.calls] == [[0], [1, 2, 3], [4, 5, 6]]
    assert {**answers, **more, **late, **last} == {x: x * 10 for x in range(7)}


@pytest.mark.parametrize("bad", [-1, "5", True])
def test_bad_batch_waits_are_refused(bad):
    with pytest.raises(ValueError, match="batch_wait_ms"):
        RequestBatcher(list, wait_ms=bad)


def test_8_threads_one_sentence_each_on_a_shared_embedder_give_the_serial_vectors(allennlp_files):
    """Within float32 rounding (ROUNDING): a merged batch pads and orders rows differently."""
    sentences = [tuple(s) for s in _thread_sentences(8, seed=11)]
    serial = ElmoEmbedder(*allennlp_files, batch_requests=False).embed_batch(sentences)
    shared = ElmoEmbedder(*allennlp_files)
    threads, answers = _start(lambda s: shared.embed_sentence(list(s)), sentences)
    _join(threads)
    for sentence, expected in zip(sentences, serial):
        np.testing.assert_allclose(answers[sentence], expected, **ROUNDING)


def test_8_threads_one_doc_each_on_a_shared_pipeline_give_the_serial_vectors():
    texts = [" ".join(s) for s in _thread_sentences(8, seed=12)]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config())
    serial = {text: doc._.elmo for text, doc in zip(texts, nlp.pipe(texts, batch_size=1))}
    threads, answers = _start(lambda text: nlp(text)._.elmo, texts)
    _join(threads)
    for text in texts:
        np.testing.assert_allclose(answers[text], serial[text], **ROUNDING)


def test_a_doc_that_raises_fails_its_own_call_and_no_other(monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config())
    texts = [" ".join(s) for s in _thread_sentences(8, seed=13)]
    serial = {text: nlp(text)._.elmo for text in texts}
    elmo = nlp.get_pipe("elmo")
    predict = elmo._predict

    def failing(docs):
        if any(doc.text == texts[5] for doc in docs):
            raise RuntimeError("this Doc fails")
        return predict(docs)

    monkeypatch.setattr(elmo, "_predict", failing)
    threads, answers = _start(lambda text: nlp(text)._.elmo, texts)
    _join(threads)
    assert isinstance(answers.pop(texts[5]), RuntimeError)
    for text, vectors in answers.items():
        np.testing.assert_allclose(vectors, serial[text], **ROUNDING)


def test_a_stateful_embedder_runs_calls_one_at_a_time_and_each_continues_the_one_before(allennlp_files):
    """Replaying the calls serially in the order they ran on a fresh stateful embedder gives the same vectors."""
    sentences = [tuple(s) for s in _thread_sentences(8, seed=14)]
    shared = ElmoEmbedder(*allennlp_files, stateful=True)
    order, running, overlap = [], [], []
    forward = shared._batches.forward

    def recording(batch, cap):
        running.append(1)
        overlap.append(len(running))
        order.append([tuple(s) for s in batch])
        try:
            return forward(batch, cap)
        finally:
            running.pop()

    shared._batches.forward = recording
    threads, answers = _start(lambda s: shared.embed_sentence(list(s)), sentences)
    _join(threads)
    assert max(overlap) == 1 and all(len(call) == 1 for call in order)
    replay = ElmoEmbedder(*allennlp_files, stateful=True)
    for (sentence,) in order:
        np.testing.assert_allclose(answers[sentence], replay.embed_sentence(list(sentence)), **ROUNDING)


def test_a_stateful_pipeline_runs_calls_one_at_a_time(monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(stateful=True))
    elmo = nlp.get_pipe("elmo")
    predict, running, sizes = elmo._predict, [], []

    def recording(docs):
        running.append(1)
        sizes.append((len(running), len(docs)))
        try:
            return predict(docs)
        finally:
            running.pop()

    monkeypatch.setattr(elmo, "_predict", recording)
    threads, answers = _start(lambda text: nlp(text)._.elmo.shape, [" ".join(s) for s in _thread_sentences(8, seed=15)])
    _join(threads)
    assert sizes == [(1, 1)] * 8 and not any(isinstance(a, BaseException) for a in answers.values())


@pytest.fixture
def ctrl_c_interrupts():
    """Python's own Ctrl-C handler for the test's duration: a suite started in the background by a shell inherits
    SIGINT ignored, and then no Ctrl-C would reach the waiting caller."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_waiting_caller_interrupted_by_ctrl_c_withdraws_its_call_and_the_batcher_goes_on(ctrl_c_interrupts):
    """The main thread waits behind a running batch and gets SIGINT (Ctrl-C): KeyboardInterrupt reaches it, its items
    never run, and the next calls are served."""
    run = _BlockingRun()
    batcher = RequestBatcher(run)
    first, answers = _start(lambda x: batcher([x])[0], [0])
    _wait_until(lambda: len(run.calls) == 1)
    main = threading.main_thread().ident
    threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        batcher([1])
    assert batcher._queue == []
    run.release.set()
    _join(first)
    assert answers == {0: 0} and batcher([2]) == [20] and run.calls == [[0], [2]]
