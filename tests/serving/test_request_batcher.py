"""The request batcher: calls from several threads run in the batches the scheduler plans, each call getting
exactly what a serial run gives it, errors and interrupts staying with their own caller.

The batch function here is a fake: ``x -> 10 * x``, recording each batch and blocking the first until released,
so that the tests queue calls behind a running batch without sleeping."""
import gc
import math
import pickle
import threading
import weakref

import pytest

from spacy_elmo.serving import CallCancelled, CancelHandle, Policy, RequestBatcher, ServingCounts

from tests.conftest import JOIN_TIMEOUT, interrupt_main_thread, join_threads, start_threads, wait_until


class BlockingRun:
    """A batch function that records its inputs, blocks its first call until released, and can raise on an item
    (``ValueError``) or, once, on its second call (``KeyboardInterrupt``, as a Ctrl-C in the thread running it)."""

    def __init__(self, raise_on=None, interrupt_once: bool = False):
        self.calls, self.threads, self.release = [], [], threading.Event()
        self.raise_on, self.interrupt_once = raise_on, interrupt_once

    def __call__(self, items: list) -> list:
        self.calls.append(list(items))
        self.threads.append(threading.current_thread())
        if len(self.calls) == 1:
            self.release.wait(JOIN_TIMEOUT)
        elif self.interrupt_once:
            self.interrupt_once = False
            raise KeyboardInterrupt
        if self.raise_on in items:
            raise ValueError(f"bad item {self.raise_on}")
        return [x * 10 for x in items]


def queue_behind_a_running_call(
    batcher: RequestBatcher, run: BlockingRun, calls: list, again: tuple = (), **options
) -> dict:
    """Call ``(0,)`` runs (and blocks); ``calls`` (tuples of items, in this order) then queue behind it; once all
    are queued the first is released. Returns what each call got, and ``"order"``: the calls as they returned.
    ``again``: the last caller's next call, made as soon as its first returns (its answer: both calls' results)."""
    threads, answers = start_threads(lambda items: batcher(items, **options), [(0,)])
    wait_until(lambda: len(run.calls) == 1)
    for n, items in enumerate(calls, start=2):
        last = again and n == len(calls) + 1
        work = (lambda items: batcher(items, **options) + batcher(again, **options)) if last else (
            lambda items: batcher(items, **options))
        threads += start_threads(work, [items], answers)[0]
        wait_until(lambda n=n: batcher.counts().waiting_calls == n)  # queued in this order (the running call is still queued)
    run.release.set()
    join_threads(threads)
    return answers


def serial(items) -> list:
    return [x * 10 for x in items]


def test_calls_arriving_during_a_batch_run_together_as_the_next_batch():
    run = BlockingRun()
    answers = queue_behind_a_running_call(RequestBatcher(run), run, [(x,) for x in range(1, 8)])
    assert run.calls[0] == [0] and sorted(run.calls[1]) == list(range(1, 8)) and len(run.calls) == 2
    answers.pop("order")
    assert answers == {(x,): [x * 10] for x in range(8)}


def test_every_batch_keeps_to_the_token_budget_and_every_call_gets_the_serial_results():
    """Items of 1 to 7 tokens against a budget of 10; an item of 15 runs in a batch of its own."""
    calls = [(1, 2, 3), (4,), (5, 6, 7, 8, 9, 10, 11, 12), (13, 114), (15, 16), (17, 18, 19, 20, 21)]
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(max_batch_tokens=10))
    tokens = {**{x: x % 7 + 1 for x in range(22)}, 114: 15}.__getitem__
    answers = queue_behind_a_running_call(batcher, run, calls, tokens=tokens)
    answers.pop("order")
    assert answers == {items: serial(items) for items in [(0,), *calls]}
    assert all(sum(map(tokens, batch)) <= 10 or len(batch) == 1 for batch in run.calls)
    assert [114] in run.calls
    assert sorted(x for batch in run.calls for x in batch) == sorted(x for items in [(0,), *calls] for x in items)


def test_a_short_call_queued_behind_a_long_one_is_answered_before_it():
    """The long call's items are cut across batches of 4; the short call, queued after it, shares the first."""
    long_call, short_call = tuple(range(100, 120)), (1,)
    run = BlockingRun()
    answers = queue_behind_a_running_call(RequestBatcher(run, Policy(max_batch_tokens=4)), run, [long_call, short_call])
    answers.pop("order")
    assert answers == {(0,): [0], long_call: serial(long_call), short_call: [10]}
    assert 1 in run.calls[1] and 119 in run.calls[-1] and all(len(batch) <= 4 for batch in run.calls)
    assert len(run.calls) == 1 + math.ceil(21 / 4)  # call 0 alone, then 21 items 4 at a time


def test_a_failing_item_raises_only_to_its_own_caller_and_the_rest_of_its_call_never_runs():
    """Item 107 of a long call cut into batches of 4 fails its batch; each call's share is run alone again."""
    long_call, shorts = tuple(range(100, 120)), [(1,), (2, 3)]
    run = BlockingRun(raise_on=107)
    answers = queue_behind_a_running_call(RequestBatcher(run, Policy(max_batch_tokens=4)), run, [long_call, *shorts])
    answers.pop("order")
    assert isinstance(answers.pop(long_call), ValueError)
    assert answers == {items: serial(items) for items in [(0,), *shorts]}
    failed = next(batch for batch in run.calls if 107 in batch)
    assert not {x for batch in run.calls for x in batch} & set(range(max(failed) + 1, 120))


def test_an_error_in_a_merged_batch_reaches_only_the_caller_whose_input_raised():
    run = BlockingRun(raise_on=3)
    answers = queue_behind_a_running_call(RequestBatcher(run), run, [(x,) for x in range(1, 8)])
    answers.pop("order")
    assert isinstance(answers.pop((3,)), ValueError)
    assert answers == {(x,): [x * 10] for x in range(8) if x != 3}


def test_an_interrupted_leader_withdraws_its_own_call_and_leaves_the_others_of_its_batch_to_the_next():
    """The thread running the second batch (shares of a long call and six short ones) gets KeyboardInterrupt: its own
    call raises it and never runs again; every other call gets its serial results."""
    calls = [tuple(range(100, 112)), *[(x,) for x in range(1, 7)]]
    run = BlockingRun(interrupt_once=True)
    answers = queue_behind_a_running_call(RequestBatcher(run, Policy(max_batch_tokens=8)), run, calls)
    answers.pop("order")
    interrupted = [items for items, answer in answers.items() if isinstance(answer, KeyboardInterrupt)]
    assert len(interrupted) == 1 and len({x // 100 for x in run.calls[1]}) == 2  # the batch mixed long and short
    assert {items: a for items, a in answers.items() if items != interrupted[0]} == {
        items: serial(items) for items in [(0,), *calls] if items != interrupted[0]
    }
    after = [x for batch in run.calls[2:] for x in batch]
    assert not set(after) & set(interrupted[0])


def test_calls_that_do_not_merge_run_alone_whole_and_in_turn_by_their_own_thread():
    before, alone, after = (1, 2, 3), (4, 5, 6, 7, 8), (9,)
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(max_batch_tokens=2))
    first, answers = start_threads(batcher, [(0,)])
    wait_until(lambda: len(run.calls) == 1)
    threads, got = [], {}
    for n, (items, merge) in enumerate([(before, True), (alone, False), (after, True)], start=2):
        threads += start_threads(lambda items, merge=merge: batcher(items, merge=merge), [items], got)[0]
        wait_until(lambda n=n: batcher.counts().waiting_calls == n)
    run.release.set()
    join_threads(first + threads)
    assert run.calls == [[0], [1, 2], [3], list(alone), [9]]
    assert run.threads[3] is threads[1] and got[alone] == serial(alone)


# A wait far beyond JOIN_TIMEOUT: a call that waited it out would show as a deadlock.
LONG_WAIT_MS = 10 * JOIN_TIMEOUT * 1000


def test_with_batch_wait_ms_a_lone_caller_never_waits():
    run = BlockingRun()
    run.release.set()
    batcher = RequestBatcher(run, Policy(batch_wait_ms=LONG_WAIT_MS))
    callers, answers = start_threads(lambda xs: [batcher([x])[0] for x in xs], [(0, 1, 2)])
    join_threads(callers)
    assert answers[(0, 1, 2)] == [0, 10, 20] and run.calls == [[0], [1], [2]]


def test_after_a_merged_batch_the_next_leader_waits_for_as_many_calls_to_join():
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(batch_wait_ms=LONG_WAIT_MS))
    first, answers = start_threads(lambda x: batcher([x])[0], [0])
    wait_until(lambda: len(run.calls) == 1)
    merged, more = start_threads(lambda x: batcher([x])[0], [1, 2, 3])
    wait_until(lambda: batcher.counts().waiting_calls == 4)
    run.release.set()
    join_threads(first + merged)
    leader, late = start_threads(lambda x: batcher([x])[0], [4])
    wait_until(lambda: batcher.counts().running)  # 4 leads, waiting for three calls as the batch before held
    joining, last = start_threads(lambda x: batcher([x])[0], [5, 6])
    join_threads(leader + joining)
    assert [sorted(c) for c in run.calls] == [[0], [1, 2, 3], [4, 5, 6]]
    for got in (answers, more, late, last):
        got.pop("order")
    assert {**answers, **more, **late, **last} == {x: x * 10 for x in range(7)}


def test_a_short_caller_calling_again_shares_the_next_batch_with_a_long_call():
    """After a batch that held a share of the long call and the short call, the next leader waits for two calls
    although the long call alone would fill the budget, and the short caller's next call joins that batch."""
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(batch_wait_ms=LONG_WAIT_MS, max_batch_tokens=4))
    answers = queue_behind_a_running_call(batcher, run, [(100, 101, 102, 103, 104), (1,)], again=(2,))
    assert run.calls == [[0], [100, 101, 102, 1], [2, 103, 104]]  # the new call first, then the long call's rest
    assert answers[(100, 101, 102, 103, 104)] == serial((100, 101, 102, 103, 104)) and answers[(1,)] == [10, 20]


def test_with_padded_tokens_a_long_call_and_a_short_one_take_turns_instead_of_sharing_batches():
    """Padded tokens (rows times the largest): items of 8 and items of 1 never share a batch of budget 10,
    and the two calls queued behind a running one take turns, the short call's six items in one batch."""
    long_call, short_call = (108, 208, 308), (1, 2, 3, 4, 5, 6)
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(max_batch_tokens=40, shared_batch_tokens=10, padded=True))
    tokens = lambda x: 8 if x >= 100 else 1  # noqa: E731
    answers = queue_behind_a_running_call(batcher, run, [long_call, short_call], tokens=tokens)
    assert run.calls == [[0], [108], list(short_call), [208], [308]]
    answers.pop("order")
    assert answers == {items: serial(items) for items in [(0,), long_call, short_call]}


@pytest.mark.parametrize("hold_s, after_meeting", [(0.0, [2, 4, 8, 16, 10]), (LONG_WAIT_MS, [2] * 20)])
def test_a_call_alone_runs_full_batches_until_calls_meet_then_shared_ones_while_held(hold_s, after_meeting):
    """Before calls meet, a call alone runs batches of max_batch_tokens; after, batches of shared_batch_tokens while the
    hold lasts (a hold longer than the test: every batch), then doubling from it (no hold: at once)."""
    run = BlockingRun()
    run.release.set()  # the first call runs without blocking
    batcher = RequestBatcher(run, Policy(max_batch_tokens=16, shared_batch_tokens=2, hold_s=hold_s))
    assert batcher(list(range(100, 130))) == serial(range(100, 130))
    assert [len(batch) for batch in run.calls] == [16, 14]  # the first call ran alone before anything was shared
    run.calls.clear()
    run.release.clear()  # the next one blocks, and two calls queue behind it
    queue_behind_a_running_call(batcher, run, [(1,), (2,)])
    assert [sorted(batch) for batch in run.calls] == [[0], [1, 2]]
    assert batcher(list(range(200, 240))) == serial(range(200, 240))
    assert [len(batch) for batch in run.calls[2:]] == after_meeting


def test_the_batcher_keeps_no_result_of_a_call_that_returned():
    class Result:
        pass

    batcher = RequestBatcher(lambda items: [Result() for _ in items], Policy(max_batch_tokens=4, shared_batch_tokens=2))
    results = batcher([1, 2, 3])
    kept = weakref.ref(results[0])
    del results
    gc.collect()
    assert kept() is None


def test_a_waiting_caller_interrupted_by_ctrl_c_withdraws_its_call_and_the_batcher_goes_on(ctrl_c_interrupts):
    """The main thread waits behind a running batch and gets SIGINT (Ctrl-C): KeyboardInterrupt reaches it, its items
    never run, and the next calls are served."""
    run = BlockingRun()
    batcher = RequestBatcher(run)
    first, answers = start_threads(lambda x: batcher([x])[0], [0])
    wait_until(lambda: len(run.calls) == 1)
    threading.Timer(0.5, interrupt_main_thread).start()
    with pytest.raises(KeyboardInterrupt):
        batcher([1])
    assert batcher.counts().waiting_calls == 1  # the running call alone
    run.release.set()
    join_threads(first)
    assert answers[0] == 0 and batcher([2]) == [20] and run.calls == [[0], [2]]


def test_a_copy_of_a_batcher_has_its_own_empty_queue():
    batcher = RequestBatcher(serial, Policy(batch_wait_ms=2, max_batch_tokens=5))
    twin = pickle.loads(pickle.dumps(batcher))
    assert (twin.policy, twin.counts().waiting_calls) == (batcher.policy, 0) and twin([1, 2]) == [10, 20]


def test_a_waiting_call_cancelled_from_another_thread_raises_and_its_items_never_run():
    run = BlockingRun()
    batcher = RequestBatcher(run)
    handle = CancelHandle()

    def cancellable(items):
        with handle.scope():
            return batcher(items)

    threads, answers = start_threads(lambda x: batcher([x])[0], [0])
    wait_until(lambda: len(run.calls) == 1)
    threads += start_threads(cancellable, [(1, 2)], answers)[0]
    threads += start_threads(lambda x: batcher([x])[0], [3], answers)[0]
    wait_until(lambda: batcher.counts().waiting_calls == 3)
    assert batcher.counts() == ServingCounts(batches_run=0, items_run=0, calls_cancelled=0, waiting_calls=3, running=True)
    handle.cancel()
    wait_until(lambda: batcher.counts().waiting_calls == 2)
    run.release.set()
    join_threads(threads)
    assert isinstance(answers[(1, 2)], CallCancelled) and (answers[0], answers[3]) == (0, 30)
    assert run.calls == [[0], [3]]
    assert batcher.counts() == ServingCounts(batches_run=2, items_run=2, calls_cancelled=1, waiting_calls=0, running=False)


def test_a_long_call_cancelled_while_its_batch_runs_stops_after_it_and_the_batch_answers_the_others():
    """The long call leads the blocked first batch (its first 4 items); cancelled then, that batch still runs, and
    none of its 16 other items ever does; a call queued meanwhile is answered."""
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(max_batch_tokens=4))
    handle = CancelHandle()

    def cancellable(items):
        with handle.scope():
            return batcher(items)

    long_call = tuple(range(100, 120))
    threads, answers = start_threads(cancellable, [long_call])
    wait_until(lambda: len(run.calls) == 1)
    threads += start_threads(lambda x: batcher([x])[0], [1], answers)[0]
    wait_until(lambda: batcher.counts().waiting_calls == 2)
    handle.cancel()
    run.release.set()
    join_threads(threads)
    assert isinstance(answers[long_call], CallCancelled) and answers[1] == 10
    assert run.calls == [[100, 101, 102, 103], [1]] and batcher.items_run == 5


def test_a_call_in_the_scope_of_a_cancelled_handle_raises_at_once():
    batcher = RequestBatcher(serial)
    handle = CancelHandle()
    handle.cancel()
    with handle.scope(), pytest.raises(CallCancelled):
        batcher([1, 2])
    assert batcher.batches_run == 0 and batcher([3]) == [30]


def test_a_leader_cancelled_while_it_waits_for_joiners_lets_the_next_call_lead():
    """After a merged batch of two the next leader waits for two calls; cancelled then, it runs nothing, and the two
    calls arriving after it are served together."""
    run = BlockingRun()
    batcher = RequestBatcher(run, Policy(batch_wait_ms=LONG_WAIT_MS))
    first, answers = start_threads(lambda x: batcher([x])[0], [0])
    wait_until(lambda: len(run.calls) == 1)
    merged, _ = start_threads(lambda x: batcher([x])[0], [1, 2])
    wait_until(lambda: batcher.counts().waiting_calls == 3)
    run.release.set()
    join_threads(first + merged)
    handle = CancelHandle()

    def cancellable(x):
        with handle.scope():
            return batcher([x])

    leader, got = start_threads(cancellable, [4])
    wait_until(lambda: batcher.counts().running)
    handle.cancel()
    join_threads(leader)
    after, later = start_threads(lambda x: batcher([x])[0], [5, 6])
    join_threads(after)
    assert isinstance(got[4], CallCancelled) and (later[5], later[6]) == (50, 60)
    assert [sorted(c) for c in run.calls] == [[0], [1, 2], [5, 6]]


class SteppedRun:
    """A batch function in ``steps`` steps, calling the batcher's pause point before each; it logs when each batch
    starts and ends, and waits at ``(first item, step)`` in ``gates`` until that event is set (``reached`` lists the
    gates it came to). Each item is its own number of tokens (a sentence's length)."""

    def __init__(self, steps: int = 3):
        self.steps, self.log, self.gates, self.reached = steps, [], {}, []
        self.batcher = None

    def __call__(self, items: list) -> list:
        self.log.append(("start", list(items)))
        for step in range(self.steps):
            gate = self.gates.get((items[0], step))
            if gate is not None:
                self.reached.append((items[0], step))
                gate.wait(JOIN_TIMEOUT)
            self.batcher.pause_point()
        self.log.append(("end", list(items)))
        return [x * 10 for x in items]


def stepped_batcher(steps: int = 3, **options) -> tuple:
    run = SteppedRun(steps)
    run.batcher = RequestBatcher(run, Policy(slice_s=0, **options))
    return run, run.batcher


def own_tokens(item: int) -> int:
    return item


def call_during(run: SteppedRun, batcher: RequestBatcher, first: tuple, later: list, **options) -> dict:
    """``first`` runs and stops at its first step; each of ``later`` is then queued in turn; it goes on. Returns
    what each call got."""
    run.gates[(first[0], 0)] = threading.Event()
    threads, answers = start_threads(lambda items: batcher(items, tokens=own_tokens, **options), [first])
    wait_until(lambda: len(run.log) == 1)
    for n, items in enumerate(later, start=2):
        threads += start_threads(lambda items: batcher(items, tokens=own_tokens, **options), [items], answers)[0]
        wait_until(lambda n=n: batcher.counts().waiting_calls == n)
    run.gates[(first[0], 0)].set()
    join_threads(threads)
    return answers


def test_a_short_call_arriving_while_a_long_batch_runs_is_served_at_its_next_pause_point():
    run, batcher = stepped_batcher()
    answers = call_during(run, batcher, (43, 42, 41, 40), [(5,)])
    assert run.log == [("start", [43, 42, 41, 40]), ("start", [5]), ("end", [5]), ("end", [43, 42, 41, 40])]
    assert answers[(5,)] == [50] and answers[(43, 42, 41, 40)] == [430, 420, 410, 400]
    assert batcher.batches_run == 2 and batcher.items_run == 5






def test_a_batch_runs_a_slice_before_it_pauses():
    run = SteppedRun()
    batcher = run.batcher = RequestBatcher(run, Policy(slice_s=JOIN_TIMEOUT * 10))
    call_during(run, batcher, (43, 42, 41, 40), [(5,)])
    assert run.log == [("start", [43, 42, 41, 40]), ("end", [43, 42, 41, 40]), ("start", [5]), ("end", [5])]


def test_a_nested_batch_does_not_pause_for_calls_arriving_while_it_runs():
    """Batches of one step: the long one pauses once, for the first short call; the second, arriving while the first
    runs nested, waits for the long one to end."""
    run, batcher = stepped_batcher(steps=1)
    run.gates[(43, 0)], run.gates[(10, 0)] = threading.Event(), threading.Event()
    threads, answers = start_threads(lambda items: batcher(items, tokens=own_tokens), [(43, 42, 41, 40)])
    wait_until(lambda: len(run.log) == 1)
    threads += start_threads(lambda items: batcher(items, tokens=own_tokens), [(10,)], answers)[0]
    wait_until(lambda: batcher.counts().waiting_calls == 2)
    run.gates[(43, 0)].set()
    wait_until(lambda: len(run.log) == 2)  # (10,) runs nested, stopped at its gate
    threads += start_threads(lambda items: batcher(items, tokens=own_tokens), [(2,)], answers)[0]
    wait_until(lambda: batcher.counts().waiting_calls == 3)
    run.gates[(10, 0)].set()
    join_threads(threads)
    assert run.log == [("start", [43, 42, 41, 40]), ("start", [10]), ("end", [10]), ("end", [43, 42, 41, 40]),
                       ("start", [2]), ("end", [2])]


def test_calls_queued_behind_a_call_that_does_not_merge_are_not_served_before_it():
    run, batcher = stepped_batcher()
    run.gates[(43, 0)] = threading.Event()
    threads, answers = start_threads(lambda items: batcher(items, tokens=own_tokens), [(43, 42, 41, 40)])
    wait_until(lambda: len(run.log) == 1)
    threads += start_threads(lambda items: batcher(items, merge=False, tokens=own_tokens), [(5,)], answers)[0]
    wait_until(lambda: batcher.counts().waiting_calls == 2)
    threads += start_threads(lambda items: batcher(items, tokens=own_tokens), [(7,)], answers)[0]
    wait_until(lambda: batcher.counts().waiting_calls == 3)
    run.gates[(43, 0)].set()
    join_threads(threads)
    assert run.log == [("start", [43, 42, 41, 40]), ("end", [43, 42, 41, 40]), ("start", [5]), ("end", [5]),
                       ("start", [7]), ("end", [7])]


def test_a_batch_whose_calls_are_all_cancelled_stops_at_its_next_pause_point():
    run, batcher = stepped_batcher()
    run.gates[(43, 0)] = threading.Event()
    handle = CancelHandle()

    def cancellable(items):
        with handle.scope():
            return batcher(items, tokens=own_tokens)

    threads, answers = start_threads(cancellable, [(43, 42, 41, 40)])
    wait_until(lambda: len(run.log) == 1)
    handle.cancel()
    run.gates[(43, 0)].set()
    join_threads(threads)
    assert isinstance(answers[(43, 42, 41, 40)], CallCancelled) and run.log == [("start", [43, 42, 41, 40])]
    assert batcher.batches_run == 0 and batcher([5]) == [50] and batcher.batches_run == 1


def test_a_pause_point_outside_a_running_batch_does_nothing():
    run, batcher = stepped_batcher()
    batcher.pause_point()
    assert batcher([1]) == [10] and run.log == [("start", [1]), ("end", [1])]
