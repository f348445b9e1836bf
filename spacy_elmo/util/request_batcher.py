"""Calls from several threads served together, in batches bounded by a cost budget: :class:`RequestBatcher`.

A service shares one model between threads. Running each call alone wastes the model's batching; running everything
queued as one batch makes a short call wait for a long one queued before it. The batcher does neither: each step
runs one batch of at most ``max_batch_cost`` (e.g. tokens), filled from the queued calls in turn, one item of each
call per round, so that a long call is cut into pieces that interleave with the short ones (the token budget per
step of chunked prefill, as in vLLM and Sarathi-Serve). A call returns when all its items are done.

Nothing here knows what the items are: ``run`` maps a list of items to one result per item.
"""
import math
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .numbers import is_number

# One step's share of a call: the call, and the range of its items the step runs.
_Slice = Tuple["_Request", int, int]
# What came back for a slice: its results, or the error running it raised.
_Outcome = Tuple[_Slice, Optional[List[Any]], Optional[Exception]]
# Lone batches counted before any batch was shared: enough doublings to reach any budget, so that until calls meet,
# a call alone runs whole batches of ``max_batch_cost``, the same pieces whatever ran before it.
_NEVER_SHARED = 32


class _Request:
    """One caller's items, their costs, how far the batches have got through them, and what came back."""

    def __init__(self, items: List[Any], merge: bool, costs: List[int]):
        self.items = items
        self.merge = merge
        self.costs = costs
        self.next = 0  # items before it are answered, or running in the current batch
        self.results: List[Any] = [None] * len(items)
        self.error: Optional[Exception] = None
        self.done = False  # answered, failed or withdrawn; changed only under the batcher's lock

    def left(self) -> int:
        return len(self.items) - self.next


class RequestBatcher:
    """Calls from several threads that arrive together, run in shared batches: opportunistic dynamic batching.

    ``run`` maps a list of items to one result per item, each result independent of the others in the list, so that
    merging or cutting calls changes no result. One thread at a time runs a batch (the leader: one of the callers
    whose items are not all answered); a call finding nothing running runs at once.

    ``max_batch_cost``: the most a batch holds, in the summed costs of its items (``cost`` of each call: a callable
    item -> int; without it each item costs 1); None: no bound, everything queued runs as one batch. ``padded``: a
    batch costs its number of items times its largest item's cost instead (a batch of sequences, each padded to the
    longest), so that items of very different costs do not share a batch.
    ``shared_batch_cost``: a smaller bound for a batch that several calls share (None: ``max_batch_cost``), so that
    each step, hence each short call's wait behind a long one, is short. Once calls have shared a batch, a call
    queued alone starts at that bound too and doubles it with each batch in a row that it has to itself, up to
    ``max_batch_cost``: a lone long call soon runs in large batches, while calls that keep arriving (a service)
    keep every step short. Until calls first meet (a script), a call alone runs in batches of ``max_batch_cost``, so
    that repeating a call repeats the same computation. An item costing more than the budget runs in a batch of
    its own.

    Turns: each batch is filled first from the calls that had no share of the batch before (oldest first), then
    from the others, one item of each per round: a long call and the short calls around it take turns instead of
    the oldest call always filling the budget first.

    ``merge=False``: the call's items run alone, all in one ``run``, by the calling thread, after the calls queued
    before it and before those queued after it (for a stateful model, whose results depend on what ran before).

    ``wait_ms`` > 0: after a batch that merged several calls (the callers are concurrent), the next leader first
    waits up to that long for as many calls to queue, so that the callers just answered, who call again, join it
    instead of running alone (or, behind a long call, waiting for one more batch); a lone caller never waits.

    Errors: when a batch of several calls raises an ``Exception``, each call's share of it runs again alone, so
    that each caller gets its results or the error its own items raise (a call that fails is done: its items not
    yet run never run). A call interrupted (``KeyboardInterrupt``
    or any other ``BaseException``, while it waits or while it runs a batch) withdraws: its items not yet answered
    never run, and the shares of other calls in the batch it was running go back to the front of the queue for the
    next leader.

    Safe to use from several threads: that is its purpose. A copy or pickle gets a new, empty queue.
    """

    def __init__(
        self,
        run: Callable[[List[Any]], List[Any]],
        wait_ms: float = 0.0,
        max_batch_cost: Optional[int] = None,
        shared_batch_cost: Optional[int] = None,
        padded: bool = False,
    ):
        if not is_number(wait_ms) or not wait_ms >= 0:
            raise ValueError(f"wait_ms must be a number of milliseconds >= 0, found {wait_ms!r}")
        for name, value in (("max_batch_cost", max_batch_cost), ("shared_batch_cost", shared_batch_cost)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, found {value!r}")
        self.run = run
        self.wait_ms = float(wait_ms)
        self.max_batch_cost = max_batch_cost
        self.shared_batch_cost = shared_batch_cost
        self.padded = padded
        self._init_queue()

    def _init_queue(self) -> None:
        self._ready = threading.Condition()
        self._queue: List[_Request] = []  # calls not done, in the order they arrived
        self._leading = False
        self._last_size = 1  # calls in the batch before: more than one means concurrent callers
        self._last_calls: List[_Request] = []  # the calls that had a share of the batch before
        self._lone_steps = _NEVER_SHARED  # batches in a row that one call had to itself since a batch was shared

    def __getstate__(self) -> dict:  # a lock cannot be copied or pickled; a copy gets its own, empty queue
        return {
            "run": self.run,
            "wait_ms": self.wait_ms,
            "max_batch_cost": self.max_batch_cost,
            "shared_batch_cost": self.shared_batch_cost,
            "padded": self.padded,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_queue()

    def __call__(self, items: Sequence[Any], merge: bool = True, cost: Optional[Callable[[Any], int]] = None) -> List[Any]:
        """``run``'s results for ``items``, one per item, computed in batches shared with the other waiting calls."""
        items = list(items)
        if not items:
            return []
        request = _Request(items, merge, [1] * len(items) if cost is None else [cost(item) for item in items])
        with self._ready:
            self._queue.append(request)
            self._ready.notify_all()  # a leader may be waiting for calls to join
        try:
            while self._step(request):
                pass
        except BaseException:
            with self._ready:
                self._finish(request)
                self._ready.notify_all()
            raise
        if request.error is not None:
            raise request.error
        return request.results

    def _step(self, request: _Request) -> bool:
        """Wait until ``request`` is done (False) or this thread may lead, then run one batch (True)."""
        leading = False
        batch: List[_Slice] = []
        try:
            with self._ready:
                while not request.done and not self._may_lead(request):
                    self._ready.wait()
                if request.done:
                    return False
                self._leading = leading = True
                batch = self._take_batch(request)
            outcomes = self._run_batch(batch)
            with self._ready:
                self._settle(outcomes)
                batch = []
            return True
        finally:
            if leading:
                with self._ready:
                    for share, start, _ in batch:  # not answered (interrupted): back to the queue as they were
                        share.next = start
                    self._leading = False
                    self._ready.notify_all()

    def _may_lead(self, request: _Request) -> bool:
        """Nobody leads, and ``request``'s thread may run the next batch."""
        return not self._leading and self._open_to(request)

    def _open_to(self, request: _Request) -> bool:
        """The next batch is not another thread's ``merge=False`` call, which only its own caller runs."""
        return self._queue[0].merge or self._queue[0] is request

    def _take_batch(self, request: _Request) -> List[_Slice]:
        """The next batch, its items marked as taken: the head call alone if it does not merge, else shares of the
        merging calls up to the first that does not, filled in turn up to the budget. Called by the leader under
        the lock."""
        if self._queue[0].merge:
            self._wait_for_joiners()
            if not self._open_to(request):  # a call withdrew while the leader waited
                return []
        head = self._queue[0]
        if not head.merge:
            head.next = len(head.items)
            self._last_size = 0
            return [(head, 0, len(head.items))]
        calls = self._in_turn(self._merging_calls())
        starts = {id(call): call.next for call in calls}
        budget = self._budget(len(calls))
        rows = used = longest = 0
        added = True
        while added:
            added = False
            for call in calls:
                if not call.left():
                    continue
                cost = call.costs[call.next]
                size = (rows + 1) * max(longest, cost) if self.padded else used + cost
                if rows == 0 or size <= budget:
                    rows, used, longest = rows + 1, size, max(longest, cost)
                    call.next += 1
                    added = True
        batch = [(call, starts[id(call)], call.next) for call in calls if call.next > starts[id(call)]]
        self._last_size = len(batch)
        self._last_calls = [share[0] for share in batch]
        self._lone_steps = self._lone_steps + 1 if len(calls) == 1 else 0
        return batch

    def _in_turn(self, calls: List[_Request]) -> List[_Request]:
        """``calls`` (oldest first) in the order they fill the next batch: those without a share of the batch before
        first."""
        served = {id(call) for call in self._last_calls}
        return [c for c in calls if id(c) not in served] + [c for c in calls if id(c) in served]

    def _budget(self, n_calls: int) -> float:
        """The next batch's cost bound: ``shared_batch_cost`` while several calls share it; for a call alone, that
        bound doubled for each batch it has had to itself, up to ``max_batch_cost``."""
        shared, most = self.shared_batch_cost, self.max_batch_cost
        if shared is None:
            return math.inf if most is None else most
        grown = shared if n_calls > 1 else shared * 2 ** min(self._lone_steps, _NEVER_SHARED)
        return grown if most is None else min(grown, max(most, shared))

    def _merging_calls(self) -> List[_Request]:
        """The queued calls that may share the next batch: those before the first ``merge=False`` call."""
        end = next((i for i, call in enumerate(self._queue) if not call.merge), len(self._queue))
        return self._queue[:end]

    def _wait_for_joiners(self) -> None:
        """After a batch of several calls, wait up to ``wait_ms`` for as many to queue (also when a long call would fill
        the budget alone: the callers just answered then share the next batch instead of waiting for one more)."""
        deadline = time.monotonic() + self.wait_ms / 1000
        while len(self._merging_calls()) < self._last_size and (left := deadline - time.monotonic()) > 0:
            self._ready.wait(left)

    def _run_batch(self, batch: List[_Slice]) -> List[_Outcome]:
        """Each share's results: all in one ``run``; on an error, each call's share alone."""
        if not batch:
            return []
        try:
            results = self.run([item for call, start, end in batch for item in call.items[start:end]])
        except Exception as err:
            if len(batch) == 1:
                return [(batch[0], None, err)]
            return [self._run_alone(share) for share in batch]
        outcomes: List[_Outcome] = []
        at = 0
        for share in batch:
            size = share[2] - share[1]
            outcomes.append((share, list(results[at : at + size]), None))
            at += size
        return outcomes

    def _run_alone(self, share: _Slice) -> _Outcome:
        call, start, end = share
        try:
            return share, list(self.run(call.items[start:end])), None
        except Exception as err:
            return share, None, err

    def _settle(self, outcomes: List[_Outcome]) -> None:
        """Give each call of the batch its results or its error; calls answered in full are done. Under the lock."""
        for (call, start, end), results, error in outcomes:
            if call.done:  # withdrawn while the batch ran
                continue
            if error is not None:
                call.error = error
                self._finish(call)
            else:
                call.results[start:end] = results
                if not call.left():
                    self._finish(call)
        self._ready.notify_all()

    def _finish(self, request: _Request) -> None:
        """Take ``request`` off the queue, done (its items not taken yet never run), and forget it (its results belong
        to its caller alone). Under the lock."""
        request.done = True
        if request in self._queue:
            self._queue.remove(request)
        if request in self._last_calls:
            self._last_calls.remove(request)
