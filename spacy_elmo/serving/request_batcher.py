"""Calls from several threads run together, in the batches the scheduler plans: :class:`RequestBatcher`.

A service shares one model between threads. Running each call alone wastes the model's batching; running everything
queued as one batch makes a short call wait for a long one queued before it. Every decision is the scheduler's
(:mod:`~spacy_elmo.serving.scheduler` lists them; its token budget per batch is chunked prefill's, as in vLLM and
Sarathi-Serve); this module keeps the queue, the lock and the leader, and runs and commits the plans.
"""
import itertools
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .cancel import CallCancelled, current_handle
from .scheduler import Plan, Policy, Running, Turns, Waiting, after_failure, join_wait, pause_due, plan_batch, plan_pause, running

# One batch's share of a call: the call, and the range of its items the batch runs.
_Share = Tuple["_Request", int, int]
# What came back for a share: its results, or the error running it raised.
_Outcome = Tuple[_Share, Optional[List[Any]], Optional[Exception]]


class _Request:
    """One caller's items, their tokens, how far the committed batches have got through them, and what came back."""

    def __init__(self, key: int, items: List[Any], merge: bool, tokens: List[int]):
        self.key = key
        self.items = items
        self.merge = merge
        self.tokens = tokens
        self.next = 0  # items before it are answered (changed only when a batch that ran is committed)
        self.results: List[Any] = [None] * len(items)
        self.error: Optional[BaseException] = None
        self.done = False  # answered, failed, cancelled or withdrawn; changed only under the batcher's lock

    def waiting(self, most: Optional[int]) -> Waiting:
        """The call as the scheduler sees it; a merging call shows at most ``most`` items (each has at least one
        token, so no batch holds more), so that planning does not copy all of a long call's tokens each time."""
        end = len(self.tokens) if most is None or not self.merge else min(len(self.tokens), self.next + most)
        return Waiting(self.key, self.tokens[self.next : end], self.merge)


class _InProgress:
    """The batch the leader's thread runs now (its calls and the scheduler's view of it), from when it may pause,
    and how many calls had arrived when it last looked at the queue."""

    def __init__(self, calls: List["_Request"], batch: Running, thread: int, due: float, seen: int):
        self.calls = calls
        self.batch = batch
        self.thread = thread
        self.due = due
        self.seen = seen


class ServingCounts(NamedTuple):
    """What a batcher has done (batches run to the end, items run, calls cancelled) and is doing (calls waiting,
    those of the running batch included; whether a batch is being planned or run), for a service's monitoring."""

    batches_run: int
    items_run: int
    calls_cancelled: int
    waiting_calls: int
    running: bool


class _Abandoned(BaseException):
    """Stops a running batch whose calls were all cancelled (a ``BaseException``: the run's own error handling
    must not take it for a failure of its items)."""


class RequestBatcher:
    """Calls from several threads that arrive together, run in shared batches: opportunistic dynamic batching.

    ``run`` maps a list of items to one result per item, each result independent of the others in the list, so that
    merging or cutting calls changes no result. One thread at a time runs a batch (the leader: one of the callers
    whose items are not all answered); a call finding nothing running runs at once. Every decision is the
    scheduler's, by ``policy`` (a :class:`~spacy_elmo.serving.scheduler.Policy`; assign a new one to change it) and
    each item's tokens (``tokens`` of a call: a callable item -> int; without it each item has 1): each call's items
    run in the order given.

    ``merge=False``: the call's items run alone, all in one ``run``, by the calling thread, after the calls queued
    before it and before those queued after it (for a stateful model, whose results depend on what ran before).

    Errors: when a batch raises an ``Exception``, what :func:`~spacy_elmo.serving.scheduler.after_failure` plans runs
    again (each call's share alone), so that each caller gets its results or the error its own items raise.
    Interrupts, by construction: the leader commits a batch (its calls' progress, the scheduler's turns) only after
    it has run, so a call interrupted (``KeyboardInterrupt`` or any other ``BaseException``, while it waits or while
    it runs a batch) only withdraws: its items not yet answered never run, and the other calls of the batch it was
    running are still waiting, as they were, for the next leader.
    Cancelling: a call made inside a :class:`~spacy_elmo.serving.cancel.CancelHandle`'s scope is cancelled by it from
    any thread: its items not yet run never run (a batch already running finishes, unless all its calls are
    cancelled and it reaches a :meth:`pause_point`) and its caller gets :class:`~spacy_elmo.serving.cancel.CallCancelled`.

    Pausing: ``run`` may call :meth:`pause_point` between its steps, where a batch gives way to calls that arrived
    while it runs, as the scheduler decides, and goes on. Results are the same: each batch computes its items as it
    would alone.

    :meth:`counts` says what the batcher has done and is doing, for a service's monitoring. Safe to use from several threads: that is its purpose. A copy or pickle gets a
    new, empty queue.
    """

    def __init__(self, run: Callable[[List[Any]], List[Any]], policy: Policy = Policy()):
        self.run = run
        self.policy = policy
        self._init_queue()

    def _init_queue(self) -> None:
        self._ready = threading.Condition()
        self._queue: List[_Request] = []  # calls not done, in the order they arrived
        self._leader: Optional[_Request] = None  # the call whose thread runs the current batch
        self._in_progress: Optional[_InProgress] = None  # the batch the leader runs now, while it may pause
        self._turns = Turns()
        self._keys = itertools.count()
        self._arrivals = 0  # calls queued so far
        self.batches_run = self.items_run = self.calls_cancelled = 0

    def __getstate__(self) -> dict:  # a lock cannot be copied or pickled; a copy gets its own, empty queue
        return {"run": self.run, "policy": self.policy}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_queue()

    def counts(self) -> ServingCounts:
        """The batcher's counts, taken together under its lock."""
        with self._ready:
            done = (self.batches_run, self.items_run, self.calls_cancelled)
            return ServingCounts(*done, len(self._queue), self._leader is not None)

    def __call__(
        self, items: Sequence[Any], merge: bool = True, tokens: Optional[Callable[[Any], int]] = None
    ) -> List[Any]:
        """``run``'s results for ``items``, one per item, computed in batches shared with the other waiting calls."""
        items = list(items)
        if not items:
            return []
        request = _Request(next(self._keys), items, merge, [1] * len(items) if tokens is None else list(map(tokens, items)))
        handle, forget = current_handle(), None
        try:
            with self._ready:
                self._queue.append(request)
                self._arrivals += 1
                self._ready.notify_all()  # a leader may be waiting for calls to join
            if handle is not None:
                forget = handle.on_cancel(lambda: self._cancel(request))
            while self._step(request):
                pass
        except BaseException:
            with self._ready:
                self._finish(request)
                if self._leader is request:  # interrupted while leading: the next caller leads
                    self._leader = None
            raise
        finally:
            if forget is not None:
                forget()
        if request.error is not None:
            raise request.error
        return request.results

    def _step(self, request: _Request) -> bool:
        """Wait until ``request`` is done (False) or this thread may lead, then run one batch and commit it (True)."""
        with self._ready:
            while not request.done and (self._leader is not None or not self._open_to(request)):
                self._ready.wait()  # until nobody leads and this thread may run the next batch
            if request.done:
                return False
            self._leader = request
            self._wait_for_joiners(request)
            if request.done or not self._open_to(request):  # cancelled, or a call before it withdrew, meanwhile
                self._leader = None
                self._ready.notify_all()
                return not request.done
            policy = self.policy
            waiting = [call.waiting(policy.max_batch_tokens) for call in self._queue]
            now = time.monotonic()
            plan = plan_batch(waiting, self._turns, policy, now)
            batch = self._bind(plan)
            in_progress = running(plan, waiting, policy.padded)
            calls = [call for call, _, _ in batch]
            self._in_progress = _InProgress(calls, in_progress, threading.get_ident(), pause_due(policy, now), self._arrivals)
        try:
            outcomes = self._run_batch(plan, batch)
        except _Abandoned:  # its calls are all cancelled: they are done already
            outcomes = []
        finally:
            self._in_progress = None
        with self._ready:  # commit: the scheduler's turns, each call's results or error; the next leader may go
            self._turns = plan.turns
            if outcomes:  # none: the batch stopped, its calls all cancelled
                self._deliver(outcomes)
            self._leader = None
            self._ready.notify_all()
        return True

    def pause_point(self) -> None:
        """Called by ``run`` between its steps: in the thread running a batch, once the scheduler's
        :func:`~spacy_elmo.serving.scheduler.pause_due` has come, run the batch it gives way to
        (:func:`~spacy_elmo.serving.scheduler.plan_pause`; a nested batch does not pause), then return so that ``run``
        goes on. When every call of the batch was cancelled, stop it (``run`` is left by an exception the batcher
        catches). Anywhere else, nothing."""
        current = self._in_progress
        if current is None or current.thread != threading.get_ident() or time.monotonic() < current.due:
            return
        if all(call.done for call in current.calls):
            raise _Abandoned()
        if current.seen == self._arrivals:
            return  # no call arrived since the last look: no need of the lock
        with self._ready:
            current.seen = self._arrivals
            policy = self.policy
            waiting = [call.waiting(policy.max_batch_tokens) for call in self._queue]
            plan = plan_pause(current.batch, waiting, self._turns, policy, time.monotonic())
            nested = self._bind(plan)
        if not nested:
            return
        paused = time.monotonic()
        self._in_progress = None  # a nested batch does not pause
        try:
            outcomes = self._run_batch(plan, nested)
        finally:
            self._in_progress = current
        with self._ready:
            self._deliver(outcomes)
        now = time.monotonic()
        current.due = pause_due(self.policy, now, now - paused)

    def _bind(self, plan: Plan) -> List[_Share]:
        """The shares ``plan`` names, as calls and ranges of their items; nothing is marked. Under the lock."""
        calls: Dict[int, _Request] = {call.key: call for call in self._queue}
        return [(calls[key], calls[key].next, calls[key].next + count) for key, count in plan.shares]

    def _open_to(self, request: _Request) -> bool:
        """The next batch is not another thread's ``merge=False`` call, which only its own caller runs (``request`` is
        queued)."""
        return self._queue[0].merge or self._queue[0] is request

    def _wait_for_joiners(self, request: _Request) -> None:
        """Wait as long as the scheduler's :func:`~spacy_elmo.serving.scheduler.join_wait` says for calls to join the
        batch ``request``'s thread leads, unless ``request`` is cancelled meanwhile. Under the lock."""
        started = time.monotonic()
        while not request.done:
            merging = next((n for n, call in enumerate(self._queue) if not call.merge), len(self._queue))
            left = join_wait(self._turns, merging, self.policy, time.monotonic() - started)
            if left <= 0:
                return
            self._ready.wait(left)

    def _run_batch(self, plan: Plan, batch: List[_Share]) -> List[_Outcome]:
        """Each share's results, all in one ``run``; after an error, what the scheduler runs again
        (:func:`~spacy_elmo.serving.scheduler.after_failure`), or the error, for the share of a batch of one."""
        try:
            results = self.run([item for call, start, end in batch for item in call.items[start:end]])
        except Exception as err:
            retries = after_failure(plan)
            if not retries:
                return [(share, None, err) for share in batch]
            shares = {share[0].key: share for share in batch}
            return [
                outcome for retry in retries for outcome in self._run_batch(retry, [shares[key] for key, _ in retry.shares])
            ]
        ends = itertools.accumulate(end - start for _, start, end in batch)
        return [(share, list(results[end - (share[2] - share[1]) : end]), None) for share, end in zip(batch, ends)]

    def _deliver(self, outcomes: List[_Outcome]) -> None:
        """Give each call of a batch that ran its results or its error (calls answered in full are done). Under the
        lock."""
        self.batches_run += 1
        for (call, start, end), results, error in outcomes:
            self.items_run += end - start
            if call.done:  # withdrawn or cancelled while the batch ran
                continue
            if error is not None:
                call.error = error
                self._finish(call)
            else:
                call.results[start:end] = results
                call.next = end
                if call.next == len(call.items):
                    self._finish(call)

    def _cancel(self, request: _Request) -> None:
        """``request`` cancelled from another thread: done, with :class:`CallCancelled` for its caller."""
        with self._ready:
            if not request.done:
                request.error = CallCancelled()
                self.calls_cancelled += 1
                self._finish(request)

    def _finish(self, request: _Request) -> None:
        """Take ``request`` off the queue, done: its items not run yet never run. Under the lock."""
        request.done = True
        if request in self._queue:
            self._queue.remove(request)
        self._ready.notify_all()
