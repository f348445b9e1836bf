"""The ``threads`` setting: torch's process-wide thread count, applied when a biLM first runs, 1 by default; the
rule where biLMs or the application set others; and one embedder or pipeline used from several Python threads at
once."""
import contextlib
import dataclasses
import math
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.errors import ElmoSettingsError, ElmoThreadsWarning
import spacy_elmo.formats.weights
import spacy_elmo.util.threads
from spacy_elmo.util.threads import torch_threads

from tests.conftest import ALLENNLP, JOIN_TIMEOUT, ROUNDING, interrupt_main_thread, join_threads, start_threads, wait_until
from tests.pipeline.conftest import elmo_config

OUTSIDE = 3  # the process's own setting in these tests: neither the default 1 nor a value the tests ask for


@pytest.fixture
def process_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(OUTSIDE)
    yield
    torch.set_num_threads(before)


def test_torch_threads_sets_and_restores(process_threads, monkeypatch):
    monkeypatch.setattr(spacy_elmo.util.threads, "_held", None)  # no holder's setting stands (as in a fresh process)
    with torch_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == OUTSIDE
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("restored on errors too")
    assert torch.get_num_threads() == OUTSIDE
    with torch_threads(None):
        assert torch.get_num_threads() == OUTSIDE


@contextlib.contextmanager
def _warns_of_outside(replaced: bool):
    """Expect the warning that a biLM's setting replaced the process's own count, or no thread warning at all."""
    if replaced:
        with pytest.warns(ElmoThreadsWarning, match=f"thread count is {OUTSIDE}, set outside spacy-elmo"):
            yield
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ElmoThreadsWarning)
            yield


def _record_threads(runtime, monkeypatch) -> list:
    """The torch thread count each biLM run of ``runtime`` sees, and each ``torch.set_num_threads`` call."""
    seen: list = []
    forward, set_threads = runtime.segment_encoder.forward, torch.set_num_threads
    monkeypatch.setattr(runtime.segment_encoder, "forward", lambda *a: seen.append(torch.get_num_threads()) or forward(*a))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(f"set {n}") or set_threads(n))
    return seen


@pytest.mark.parametrize("settings, during", [({}, 1), ({"threads": 2}, 2), ({"threads": None}, OUTSIDE)])
def test_embedder_sets_its_threads_once_and_leaves_them(process_threads, allennlp_files, monkeypatch, settings, during):
    """No ``threads`` argument: the default, 1; ``None``: torch's own setting. torch's count is process-wide: set
    by the first call, and no later call sets it again."""
    embedder = ElmoEmbedder(*allennlp_files, **settings)
    seen = _record_threads(embedder.runtime, monkeypatch)
    with _warns_of_outside(during != OUTSIDE):  # it replaces the process's own count
        for _ in range(3):
            embedder.embed_sentence(["The", "cat", "sat"])
    set_once = [] if during == OUTSIDE else [f"set {during}"]
    assert seen == [*set_once, during, during, during] and torch.get_num_threads() == during


@pytest.mark.parametrize("threads, during", [(None, 1), (2, 2), ("null", OUTSIDE)])
def test_component_sets_its_threads_once_and_leaves_them(process_threads, monkeypatch, threads, during):
    """``None`` here: the setting left out of the config (default 1); ``"null"``: keep torch's own setting."""
    nlp = spacy.blank("en")
    config = elmo_config() if threads is None else elmo_config(threads=None if threads == "null" else threads)
    nlp.add_pipe("elmo", config=config)
    seen = _record_threads(nlp.get_pipe("elmo").runtime, monkeypatch)
    with _warns_of_outside(during != OUTSIDE):
        docs = list(nlp.pipe(["The cat sat .", "It was happy ."])) + [nlp("Once more .")]
    set_once = [] if during == OUTSIDE else [f"set {during}"]
    assert seen == [*set_once, during, during] and torch.get_num_threads() == during
    assert all(doc._.elmo.shape == (len(doc), 32) for doc in docs)


def test_the_count_applied_last_holds_and_a_biLM_running_under_another_says_so_once(process_threads, allennlp_files):
    """torch has one count per process: two embedders with different settings, then the application's own
    ``torch.set_num_threads``; whoever applied a count last, it holds, and each biLM running under a count other than
    its setting warns once. A first run replaces a count set outside spacy-elmo, with a warning."""
    one, two = ElmoEmbedder(*allennlp_files, threads=1), ElmoEmbedder(*allennlp_files, threads=2)
    words = ["The", "cat", "sat"]
    with pytest.warns(ElmoThreadsWarning, match=f"thread count is {OUTSIDE}, set outside spacy-elmo") as caught:
        one.embed_sentence(words)
    assert torch.get_num_threads() == 1 and len(caught) == 1
    with _warns_of_outside(False):
        two.embed_sentence(words)  # its own first run applies its setting: 2 holds from now on
    assert torch.get_num_threads() == 2
    with pytest.warns(ElmoThreadsWarning, match="runs on 2 torch threads, not its threads=1") as caught:
        one.embed_sentence(words)
        one.embed_sentence(words)
    assert torch.get_num_threads() == 2 and len(caught) == 1
    torch.set_num_threads(OUTSIDE)  # the application's own setting, applied last
    with pytest.warns(ElmoThreadsWarning, match=f"runs on {OUTSIDE} torch threads, not its threads=2") as caught:
        two.embed_sentence(words)
        one.embed_sentence(words)  # it has said so already
    assert torch.get_num_threads() == OUTSIDE and len(caught) == 1


@pytest.mark.filterwarnings("ignore:.*set outside spacy-elmo:spacy_elmo.errors.ElmoThreadsWarning")  # tested above
@pytest.mark.parametrize("warm", [True, False], ids=["serving", "first-run-during-the-check"])
def test_a_model_loaded_while_another_runtime_serves_leaves_the_servers_thread_count(
    process_threads, allennlp_files, monkeypatch, warm
):
    """A model loads (its weights checked at one thread) in this thread while a runtime set to 2 threads serves from
    another, inside the check: the runs see 2, before, during and after, and torch keeps 2 after the check. ``warm``:
    the runtime ran before (its setting stood); else its first run, which applies it, is inside the check."""
    serving = ElmoEmbedder(*allennlp_files, threads=2)
    seen = _record_threads(serving.runtime, monkeypatch)
    if warm:
        serving.embed_sentence(["Before", "."])
    check_block = spacy_elmo.formats.weights.torch_threads

    @contextlib.contextmanager
    def serving_during(threads):
        with check_block(threads):
            during, _ = start_threads(lambda words: serving.embed_sentence(list(words)), [("During", "the", "check")])
            join_threads(during)
            yield

    monkeypatch.setattr(spacy_elmo.formats.weights, "torch_threads", serving_during)
    ElmoEmbedder(*allennlp_files)  # threads=1, a setting that applies at its first run: it never runs here
    serving.embed_sentence(["After", "."])
    assert [n for n in seen if not isinstance(n, str)] == [2] * (3 if warm else 2)
    assert torch.get_num_threads() == 2


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
    assert torch.get_num_threads() == 1  # the biLM's setting (the conftest's too)


# --- calls from several threads merged into one biLM batch (batch_requests; tests/serving/test_request_batcher.py tests the batcher) ---

def test_8_threads_one_sentence_each_on_a_shared_embedder_give_the_serial_vectors(allennlp_files):
    """Within float32 rounding (ROUNDING): a merged batch pads and orders rows differently."""
    sentences = [tuple(s) for s in _thread_sentences(8, seed=11)]
    serial = ElmoEmbedder(*allennlp_files, batch_requests=False).embed_batch(sentences)
    shared = ElmoEmbedder(*allennlp_files)
    threads, answers = start_threads(lambda s: shared.embed_sentence(list(s)), sentences)
    join_threads(threads)
    for sentence, expected in zip(sentences, serial):
        np.testing.assert_allclose(answers[sentence], expected, **ROUNDING)


def test_8_threads_one_doc_each_on_a_shared_pipeline_give_the_serial_vectors():
    texts = [" ".join(s) for s in _thread_sentences(8, seed=12)]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config())
    serial = {text: doc._.elmo for text, doc in zip(texts, nlp.pipe(texts, batch_size=1))}
    threads, answers = start_threads(lambda text: nlp(text)._.elmo, texts)
    join_threads(threads)
    for text in texts:
        np.testing.assert_allclose(answers[text], serial[text], **ROUNDING)


def test_a_doc_that_raises_fails_its_own_call_and_no_other(monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config())
    texts = [" ".join(s) for s in _thread_sentences(8, seed=13)]
    serial = {text: nlp(text)._.elmo for text in texts}
    batches = nlp.get_pipe("elmo").runtime.segment_encoder
    forward, bad = batches.forward, [token.text for token in nlp.make_doc(texts[5])]

    def failing(segments, *args):
        if any(list(words) == bad for words in segments):
            raise RuntimeError("this Doc fails")
        return forward(segments, *args)

    monkeypatch.setattr(batches, "forward", failing)
    threads, answers = start_threads(lambda text: nlp(text)._.elmo, texts)
    join_threads(threads)
    answers.pop("order")
    assert isinstance(answers.pop(texts[5]), RuntimeError)
    for text, vectors in answers.items():
        np.testing.assert_allclose(vectors, serial[text], **ROUNDING)


def test_a_stateful_embedder_runs_calls_one_at_a_time_and_each_continues_the_one_before(allennlp_files):
    """Replaying the calls serially in the order they ran on a fresh stateful embedder gives the same vectors."""
    sentences = [tuple(s) for s in _thread_sentences(8, seed=14)]
    shared = ElmoEmbedder(*allennlp_files, stateful=True)
    order, running, overlap = [], [], []
    forward = shared.runtime.segment_encoder.forward

    def recording(batch, *args):
        running.append(1)
        overlap.append(len(running))
        order.append([tuple(s) for s in batch])
        try:
            return forward(batch, *args)
        finally:
            running.pop()

    shared.runtime.segment_encoder.forward = recording
    threads, answers = start_threads(lambda s: shared.embed_sentence(list(s)), sentences)
    join_threads(threads)
    assert max(overlap) == 1 and all(len(call) == 1 for call in order)
    replay = ElmoEmbedder(*allennlp_files, stateful=True)
    for (sentence,) in order:
        np.testing.assert_allclose(answers[sentence], replay.embed_sentence(list(sentence)), **ROUNDING)


def test_a_stateful_pipeline_runs_calls_one_at_a_time(monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(stateful=True))
    batches = nlp.get_pipe("elmo").runtime.segment_encoder
    forward, running, sizes = batches.forward, [], []

    def recording(segments, *args):
        running.append(1)
        sizes.append((len(running), len(segments)))
        try:
            return forward(segments, *args)
        finally:
            running.pop()

    monkeypatch.setattr(batches, "forward", recording)
    threads, answers = start_threads(lambda text: nlp(text)._.elmo.shape, [" ".join(s) for s in _thread_sentences(8, seed=15)])
    join_threads(threads)
    assert sizes == [(1, 1)] * 8 and not any(isinstance(a, BaseException) for a in answers.values())




def test_after_ctrl_c_in_the_middle_of_a_stateful_call_the_next_call_is_an_uninterrupted_embedders(
    allennlp_files, monkeypatch, ctrl_c_interrupts
):
    """Ctrl-C after the biLM has run the first call's sentence, before the call returns: the state it would carry is
    dropped with the call, and the next call runs alone (the abandoned one is not run again) and gives what a fresh
    stateful embedder gives."""
    first, second = [list(s) for s in _thread_sentences(2, seed=16)]
    shared = ElmoEmbedder(*allennlp_files, stateful=True)
    encode, ran, reached = shared.encoder.encode, [], threading.Event()

    def interrupted_once(sentences, *args):
        ran.append([list(s) for s in sentences])
        final = encode(sentences, *args)
        if len(ran) == 1:
            reached.set()
            for _ in range(JOIN_TIMEOUT * 100):  # Ctrl-C arrives here (short sleeps: each returns to Python)
                time.sleep(0.01)
        return final

    monkeypatch.setattr(shared.encoder, "encode", interrupted_once)
    threading.Thread(target=lambda: reached.wait(JOIN_TIMEOUT) and interrupt_main_thread(), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        shared.embed_sentence(first)
    got = shared.embed_sentence(second)
    assert ran == [[first], [second]]
    np.testing.assert_array_equal(got, ElmoEmbedder(*allennlp_files, stateful=True).embed_sentence(second))


def test_after_ctrl_c_in_a_merged_batch_every_other_caller_gets_its_own_vectors(allennlp_files, monkeypatch):
    """The thread running the merged batch of seven calls is interrupted (KeyboardInterrupt in its biLM call): its own
    call raises it, the six others get their serial vectors, and none is left waiting (a deadlock fails the join)."""
    sentences = [tuple(s) for s in _thread_sentences(8, seed=17)]
    serial = dict(zip(sentences, ElmoEmbedder(*allennlp_files, batch_requests=False).embed_batch(sentences)))
    shared = ElmoEmbedder(*allennlp_files)
    # No pauses: the first run, held here past its slice, would serve some of the calls queued meanwhile inside it.
    shared.runtime.batcher.policy = dataclasses.replace(shared.runtime.batcher.policy, slice_s=math.inf)
    forward, calls, release = shared.runtime.segment_encoder.forward, [], threading.Event()

    def blocking_then_interrupted(batch, *args):
        calls.append(len(batch))
        if len(calls) == 1:
            release.wait(JOIN_TIMEOUT)
        elif len(calls) == 2:
            raise KeyboardInterrupt
        return forward(batch, *args)

    monkeypatch.setattr(shared.runtime.segment_encoder, "forward", blocking_then_interrupted)
    threads, answers = start_threads(lambda s: shared.embed_sentence(list(s)), sentences[:1])
    wait_until(lambda: len(calls) == 1)
    threads += start_threads(lambda s: shared.embed_sentence(list(s)), sentences[1:], answers)[0]
    wait_until(lambda: shared.runtime.batcher.counts().waiting_calls == 8)
    release.set()
    join_threads(threads)
    answers.pop("order")
    interrupted = [s for s, answer in answers.items() if isinstance(answer, KeyboardInterrupt)]
    assert calls[1] == 7 and len(interrupted) == 1
    for sentence in set(sentences) - set(interrupted):
        np.testing.assert_allclose(answers[sentence], serial[sentence], **ROUNDING)


@pytest.mark.parametrize("bad", [-1, "5", True])
def test_bad_batch_waits_are_refused(allennlp_files, bad):
    with pytest.raises(ElmoSettingsError, match="batch_wait_ms"):
        ElmoEmbedder(*allennlp_files, batch_wait_ms=bad)


def test_a_long_call_shares_batches_of_shared_batch_tokens_with_short_ones_and_all_get_the_serial_vectors(
    allennlp_files, monkeypatch
):
    """40 sentences in one call and 7 one-sentence calls, queued behind a running call: every biLM call they share
    holds at most ``shared_batch_tokens`` padded tokens (rows times the longest row, markers included), and every
    short call is answered before the long one."""
    sentences = [tuple(s) for s in _thread_sentences(48, seed=18)]
    long_call, shorts = tuple(sentences[:40]), sentences[40:47]
    serial = dict(zip(sentences, ElmoEmbedder(*allennlp_files, batch_requests=False).embed_batch(sentences)))
    shared = ElmoEmbedder(*allennlp_files, max_batch_tokens=120, shared_batch_tokens=120)
    forward, batches, release = shared.runtime.segment_encoder.forward, [], threading.Event()

    def blocking_first(batch, *args):
        batches.append([tuple(s) for s in batch])
        if len(batches) == 1:
            release.wait(JOIN_TIMEOUT)
        return forward(batch, *args)

    monkeypatch.setattr(shared.runtime.segment_encoder, "forward", blocking_first)
    threads, answers = start_threads(lambda s: shared.embed_sentence(list(s)), sentences[47:])
    wait_until(lambda: len(batches) == 1)
    threads += start_threads(lambda call: shared.embed_batch([list(s) for s in call]), [long_call], answers)[0]
    wait_until(lambda: shared.runtime.batcher.counts().waiting_calls == 2)
    threads += start_threads(lambda s: shared.embed_sentence(list(s)), shorts, answers)[0]
    wait_until(lambda: shared.runtime.batcher.counts().waiting_calls == 9)
    release.set()
    join_threads(threads)
    assert all(len(batch) * max(len(s) + 2 for s in batch) <= 120 for batch in batches)
    batch_of = {sentence: i for i, batch in enumerate(batches) for sentence in batch}
    assert max(batch_of[s] for s in shorts) < max(batch_of[s] for s in long_call)
    for sentence, got in [*zip(long_call, answers[long_call]), *((s, answers[s]) for s in shorts)]:
        np.testing.assert_allclose(got, serial[sentence], **ROUNDING)
