"""The runtime: settings decided once, applied when they change, outputs each caller's own, state left whole."""
import dataclasses
from collections import Counter

import numpy as np
import pytest
import spacy
import torch

import spacy_elmo.model.bilm
import spacy_elmo.model.lstm
import spacy_elmo.pipeline.component
from spacy_elmo import CallCancelled, CancelHandle, ElmoEmbedder, ElmoSettingsError
from spacy_elmo.errors import ElmoThreadsWarning
from spacy_elmo.formats.weights import load_files
from spacy_elmo.model.encoder import ElmoEncoder
from spacy_elmo.runtime import BiLmSettings, ElmoRuntime

from tests.conftest import ALLENNLP, ROUNDING, join_threads, start_threads, wait_until

OPTIONS, WEIGHTS = ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"
SENTENCES = [["The", "cat", "sat", "."], ["A", "much", "longer", "sentence", "follows", "here", "."], ["One"]]


def _counting(counts: Counter, name: str, function):
    def counted(*args, **kwargs):
        counts[name] += 1
        return function(*args, **kwargs)

    return counted


@pytest.fixture
def restored_threads():
    """torch's process-wide thread count, put back after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_hundred_calls_with_unchanged_settings_decide_nothing_again(monkeypatch, restored_threads):
    """Threads, the mix's weights and the int8 weights are decided when they change, not per call: the thread
    setting, applied by the first call, is not applied again when the application changes torch's count after (the
    biLM says once that it runs under another count)."""
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "precision": "int8"}
    nlp.add_pipe("elmo", config={"model": model, "mix": "average", "threads": 1})
    nlp("Warm it up .")
    torch.set_num_threads(2)  # the application's choice, which differs from the setting
    counts: Counter = Counter()
    monkeypatch.setattr(torch, "set_num_threads", _counting(counts, "set_num_threads", torch.set_num_threads))
    for module, name in [
        (spacy_elmo.pipeline.component, "fixed_mix_weights"),
        (spacy_elmo.model.bilm, "low_precision_linear"),
        (spacy_elmo.model.lstm, "low_precision_linear"),
        (spacy_elmo.model.lstm, "StackedProducts"),
    ]:
        monkeypatch.setattr(module, name, _counting(counts, name, getattr(module, name)))
    with pytest.warns(ElmoThreadsWarning, match="runs on 2 torch threads, not its threads=1") as caught:
        for i in range(100):
            nlp(f"Call number {i} reads a sentence .")
    assert counts == Counter() and len(caught) == 1


def test_a_changed_setting_is_applied_and_the_others_are_left_as_they_are():
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS), cache_size=100))
    runtime.layers(SENTENCES)
    cached = len(runtime.encoder.cache)
    runtime.configure(runtime.settings.replace(max_batch_tokens=64))
    assert len(runtime.encoder.cache) == cached > 0 and runtime.batcher.policy.max_batch_tokens == 64
    runtime.configure(runtime.settings.replace(cache_size=7))
    assert runtime.encoder.cache.capacity == 7 and len(runtime.encoder.cache) == 0


def test_settings_are_checked_once_when_made():
    with pytest.raises(ElmoSettingsError, match="max_batch_tokens"):
        BiLmSettings(max_batch_tokens=0)
    with pytest.raises(ElmoSettingsError, match="frozen"):
        BiLmSettings(precision="int8", frozen=False)
    with pytest.raises(ElmoSettingsError, match="Unknown ELMo biLM setting 'colour'; known: options_file, "):
        BiLmSettings().replace(colour=3)
    with pytest.raises(ElmoSettingsError, match="Unknown ELMo biLM setting 'precison'; did you mean 'precision'"):
        BiLmSettings().replace(precison="int8")


def test_the_mix_accumulated_per_layer_equals_the_mix_of_the_layers():
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS)))
    weights = (0.2, 0.5, 0.3)
    for layers, mixed in zip(runtime.layers(SENTENCES), runtime.mixed(SENTENCES, weights)):
        np.testing.assert_allclose(mixed, np.tensordot(np.float32(weights), layers, axes=1), **ROUNDING)


def test_the_top_mix_is_the_top_layer_itself():
    """Only the top layer is read for ``"top"``: the same computation as the layers' top, bit for bit."""
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS)))
    for layers, mixed in zip(runtime.layers(SENTENCES), runtime.mixed(SENTENCES, (0.0, 0.0, 1.0))):
        np.testing.assert_array_equal(mixed, layers[-1])


def test_a_mix_with_spare_columns_is_the_first_columns_of_a_wider_array():
    """What the ``elmo`` component makes ``doc.tensor`` of, its mark column added without a copy."""
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS)))
    for layers, mixed in zip(runtime.layers(SENTENCES), runtime.mixed(SENTENCES, (0.0, 0.0, 1.0), spare_columns=2)):
        np.testing.assert_array_equal(mixed, layers[-1])
        assert mixed.base.shape == (len(mixed), mixed.shape[1] + 2) and np.shares_memory(mixed, mixed.base)


def test_layers_in_one_output_equal_each_sentence_alone():
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS), max_batch_tokens=20))
    together = runtime.layers(SENTENCES)
    for sentence, layers in zip(SENTENCES, together):
        np.testing.assert_allclose(layers, runtime.layers([sentence])[0], **ROUNDING)


def test_joined_segments_come_back_end_to_end_in_arrays_of_their_own():
    """Groups of 2, 0 and 1 segments: each group's array is its segments' layers side by side (an empty group: no
    tokens), and owns its memory, as a Doc's windows come back."""
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS), max_batch_tokens=20))
    alone = [runtime.layers([sentence])[0] for sentence in SENTENCES]
    first, empty, last = runtime.layers(SENTENCES, joined=[2, 0, 1])
    np.testing.assert_allclose(first, np.concatenate(alone[:2], axis=1), **ROUNDING)
    np.testing.assert_allclose(last, alone[2], **ROUNDING)
    assert empty.shape == (3, 0, alone[0].shape[-1]) and first.base is None and last.base is None
    with pytest.raises(ValueError, match="joined"):
        runtime.layers(SENTENCES, joined=[1, 1])


def test_each_doc_and_sentence_holds_its_own_rows():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"store_layers": True})
    docs = list(nlp.pipe(["The first text .", "A second , longer text ."]))
    arrays = [x for doc in docs for x in (doc._.elmo, doc._.elmo_layers)]
    assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1 :] if a is not b)
    first, second = ElmoEmbedder().embed_batch(SENTENCES[:2])
    assert not np.shares_memory(first, second)


def test_an_interrupted_stateful_call_leaves_the_carried_state_as_it_was(monkeypatch):
    """Ctrl-C once a call's state is computed: the next call continues from the state before it, as if the
    interrupted call had never been made (not retried, not half applied)."""
    settings = BiLmSettings(str(OPTIONS), str(WEIGHTS), stateful=True, batch_requests=False)
    runtime = ElmoRuntime(ElmoEncoder(load_files(OPTIONS, WEIGHTS)), settings)
    reference = ElmoRuntime(ElmoEncoder(load_files(OPTIONS, WEIGHTS)), settings)
    for r in (runtime, reference):
        r.layers(SENTENCES[:2])
    encode = runtime.encoder.encode

    def interrupted(*args, **kwargs):
        encode(*args, **kwargs)  # the call's state is computed, then Ctrl-C arrives before it returns
        raise KeyboardInterrupt

    monkeypatch.setattr(runtime.encoder, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runtime.layers(SENTENCES[1:])
    monkeypatch.setattr(runtime.encoder, "encode", encode)
    for a, b in zip(runtime.layers(SENTENCES), reference.layers(SENTENCES)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch_requests", [True, False])
def test_a_call_cancelled_during_its_first_run_runs_no_other(monkeypatch, batch_requests):
    """Thirty sentences under a cap of 20 padded tokens need many runs; the handle is cancelled while the first
    runs (as by another thread): the call raises CallCancelled after it, and the runtime serves the next call."""
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS), max_batch_tokens=20, batch_requests=batch_requests))
    handle, runs = CancelHandle(), []
    forward = runtime.segment_encoder.forward

    def cancelling(segments, *args):
        runs.append(len(segments))
        handle.cancel()
        return forward(segments, *args)

    monkeypatch.setattr(runtime.segment_encoder, "forward", cancelling)
    with handle.scope(), pytest.raises(CallCancelled):
        runtime.layers(SENTENCES * 10)
    assert len(runs) == 1
    assert [layers.shape[1] for layers in runtime.layers(SENTENCES)] == [len(s) for s in SENTENCES]


def test_a_short_call_arriving_during_a_long_run_is_served_inside_it_and_both_get_their_own_vectors(monkeypatch):
    """The long call's run (its longest sentence 40 words) pauses at an LSTM step once the short call (4 words) has
    queued: the short call's batch runs there, and each call's layers are bit for bit those it gets alone (each
    batch is the same computation)."""
    runtime = ElmoRuntime.load(BiLmSettings(str(OPTIONS), str(WEIGHTS)))
    long_call, short_call = SENTENCES * 20 + [["word"] * 40], [["A", "short", "one", "."]]
    long_alone, short_alone = runtime.layers(long_call), runtime.layers(short_call)
    runtime.batcher.policy = dataclasses.replace(runtime.batcher.policy, slice_s=0)
    log, threads, answers = [], [], {}
    forward, pause_point = runtime.segment_encoder.forward, runtime.batcher.pause_point

    def logged(segments, *args):
        log.append(("start", len(segments)))
        out = forward(segments, *args)
        log.append(("end", len(segments)))
        return out

    def pausing():
        if not threads:  # the long run's first step: the short call arrives
            threads.extend(start_threads(lambda _: runtime.layers(short_call), ["short"], answers)[0])
            wait_until(lambda: runtime.batcher.counts().waiting_calls == 2)
        pause_point()

    monkeypatch.setattr(runtime.segment_encoder, "forward", logged)
    monkeypatch.setattr(runtime.batcher, "pause_point", pausing)
    long_layers = runtime.layers(long_call)
    join_threads(threads)
    assert log == [("start", 61), ("start", 1), ("end", 1), ("end", 61)]
    np.testing.assert_array_equal(answers["short"][0], short_alone[0])
    for a, b in zip(long_layers, long_alone):
        np.testing.assert_array_equal(a, b)


# --- runs with autograd, in pieces within the budget ---


def record_bilm_runs(monkeypatch) -> list:
    """Each biLM batch run from now on, as (rows, padded tokens: rows times the longest row, torch threads)."""
    runs: list = []
    run = spacy_elmo.model.bilm.BiLm.run

    def recorded(bilm, inputs, packing, *args, **kwargs):
        runs.append((packing.batch, packing.batch * int(packing.lengths.max()), torch.get_num_threads()))
        return run(bilm, inputs, packing, *args, **kwargs)

    monkeypatch.setattr(spacy_elmo.model.bilm.BiLm, "run", recorded)
    return runs


def _fine_tuned_step(runtime: ElmoRuntime, calls: list) -> tuple:
    """Two calls' layers through ``trained_layers`` and the gradients of a fixed loss on them."""
    runtime.encoder.zero_grad()
    outputs = [runtime.trained_layers(segments) for segments in calls]
    generator = torch.Generator().manual_seed(0)
    loss = sum((x * torch.randn(x.shape, generator=generator)).sum() for x in outputs)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in runtime.encoder.named_parameters()}
    return [x.detach() for x in outputs], grads


ZEROS = {"initial_state": "zeros"}  # no warm-up runs of the biLM


@pytest.mark.parametrize("stateful", [False, True])
def test_fine_tuning_runs_in_pieces_within_the_budget_with_the_gradients_of_one_batch(monkeypatch, stateful):
    """Budget 20 padded tokens: two calls of six sentences run in pieces, each run again in the backward pass; the
    layers (in the sentences' order), the carried state and the gradients are those of one batch per call."""
    calls = [SENTENCES * 2, SENTENCES[::-1] * 2]
    whole = ElmoRuntime.load(BiLmSettings(OPTIONS, WEIGHTS, frozen=False, stateful=stateful, max_batch_tokens=10_000, **ZEROS))
    pieces = ElmoRuntime.load(BiLmSettings(OPTIONS, WEIGHTS, frozen=False, stateful=stateful, max_batch_tokens=20, **ZEROS))
    expected, expected_grads = _fine_tuned_step(whole, calls)
    runs = record_bilm_runs(monkeypatch)
    found, grads = _fine_tuned_step(pieces, calls)
    for x, y in zip(found, expected):
        torch.testing.assert_close(x, y, **ROUNDING)
    for name, grad in expected_grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    if stateful:
        for a, b in zip(vars(pieces.carried.state).values(), vars(whole.carried.state).values()):
            torch.testing.assert_close(a, b, **ROUNDING)
    # rows of 6, 9 and 3 tokens with their marks, longest first: (9, 9), (6, 6, 3), (3) in each call of six, each
    # piece twice (forward, then again in the backward pass)
    assert all(padded <= 20 for _, padded, _ in runs) and len(runs) == 2 * 2 * 3
