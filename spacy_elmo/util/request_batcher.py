"""Calls from several threads run together, in the batches :func:`~spacy_elmo.util.batch_planner.plan_batch`
plans: :class:`RequestBatcher`.

A service shares one model between threads. Running each call alone wastes the model's batching; running everything
queued as one batch makes a short call wait for a long one queued before it. The planner decides what each batch
holds (a cost budget, the calls taking turns: the token budget per step of chunked prefill, as in vLLM and
Sarathi-Serve); this module is the thin layer that runs its plans: one caller at a time leads, plans the next batch
under the lock, runs it, and only then commits what it ran. A call returns when all its items are done. A run
that can stop between its steps and go on (the biLM's, between LSTM steps) calls :meth:`RequestBatcher.pause_point`
there: calls that arrived while it runs are served in a batch of their own, so a short call waits for a slice of the
run in progress instead of all of it.

Nothing here knows what the items are: ``run`` maps a list of items to one result per item.
"""
import itertools
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .batch_planner import DEFAULT_HOLD_S, Budgets, Plan, Turns, Waiting, batch_cost, plan_batch
from .cancel import CallCancelled, current_handle
from .numbers import is_number

# How long a run goes on at least, from its start or its last pause, before it gives way to calls that arrived
# while it runs (:meth:`RequestBatcher.pause_point`): a short call's wait behind a long run, and the long run's
# least share of the time while calls keep arriving (a one-row step of the embedded model takes about 0.2 ms).
DEFAULT_SLICE_S = 0.02

# While calls keep arriving, the share of the time a running batch keeps between its pauses: after a pause of ``d``
# it runs ``d * share / (1 - share)`` before the next. Calls arriving then wait longer, the batch's calls less: with
# seven threads of one-sentence calls beside a 30,000-word text, shares of 0.5, 0.67 and 0.8 took the text 25-26,
# 20-21 and 17-19 s (13-14 s without pauses), the short calls' p95 102-107, 132-140 and 136-145 ms (145-149 ms).
RUNNING_SHARE = 0.8

# One batch's share of a call: the call, and the range of its items the batch runs.
_Share = Tuple["_Request", int, int]
# What came back for a share: its results, or the error running it raised.
_Outcome = Tuple[_Share, Optional[List[Any]], Optional[Exception]]


class _Request:
    """One caller's items, their costs, how far the committed batches have got through them, and what came back."""

    def __init__(self, key: int, items: List[Any], merge: bool, costs: List[int]):
        self.key = key
        self.items = items
        self.merge = merge
        self.costs = costs
        self.next = 0  # items before it are answered (changed only when a batch that ran is committed)
        self.results: List[Any] = [None] * len(items)
        self.error: Optional[BaseException] = None
        self.done = False  # answered, failed, cancelled or withdrawn; changed only under the batcher's lock

    def waiting(self, most: Optional[int]) -> Waiting:
        """The call as the planner sees it; a merging call shows at most ``most`` items (each costs at least 1, so
        no batch holds more), so that planning does not copy all of a long call's costs each time."""
        end = len(self.costs) if most is None or not self.merge else min(len(self.costs), self.next + most)
        return Waiting(self.key, self.costs[self.next : end], self.merge)


class _Running:
    """The batch the leader's thread runs now (its calls, its largest item and its cost), from when it may pause,
    and how many calls had arrived when it last looked at the queue."""

    def __init__(self, batch: List[_Share], padded: bool, thread: int, due: float, seen: int):
        self.calls = {call for call, _, _ in batch}
        costs = [cost for call, start, end in batch for cost in call.costs[start:end]]
        self.largest = max(costs, default=0)
        self.cost = batch_cost(len(costs), self.largest, sum(costs), padded)
        self.thread = thread
        self.due = due
        self.seen = seen


class _Abandoned(BaseException):
    """Stops a running batch whose calls were all cancelled (a ``BaseException``: the run's own error handling
    must not take it for a failure of its items)."""


class RequestBatcher:
    """Calls from several threads that arrive together, run in shared batches: opportunistic dynamic batching.

    ``run`` maps a list of items to one result per item, each result independent of the others in the list, so that
    merging or cutting calls changes no result. One thread at a time runs a batch (the leader: one of the callers
    whose items are not all answered); a call finding nothing running runs at once. What each batch holds is
    :func:`~spacy_elmo.util.batch_planner.plan_batch`'s decision, with ``max_batch_cost``, ``shared_batch_cost``
    and ``padded`` as its :class:`~spacy_elmo.util.batch_planner.Budgets` (``cost`` of each call: a callable
    item -> int; without it each item costs 1): each call's items run in the order given.

    ``merge=False``: the call's items run alone, all in one ``run``, by the calling thread, after the calls queued
    before it and before those queued after it (for a stateful model, whose results depend on what ran before).

    ``wait_ms`` > 0: after a batch that merged several calls (the callers are concurrent), the next leader first
    waits up to that long for as many calls to queue, so that the callers just answered, who call again, join it
    instead of running alone (or, behind a long call, waiting for one more batch); a lone caller never waits.

    Errors: when a batch of several calls raises an ``Exception``, each call's share of it runs again alone, so
    that each caller gets its results or the error its own items raise (a call that fails is done: its items not
    yet run never run). Interrupts, by construction: the leader commits a batch (its calls' progress, the planner's
    turns) only after it has run, so a call interrupted (``KeyboardInterrupt`` or any other ``BaseException``, while
    it waits or while it runs a batch) only withdraws: its items not yet answered never run, and the other calls of
    the batch it was running are still waiting, as they were, for the next leader.
    Cancelling: a call made inside a :class:`~spacy_elmo.util.cancel.CancelHandle`'s scope is cancelled by it from
    any thread: its items not yet run never run (a batch already running finishes, unless all its calls are
    cancelled and it reaches a :meth:`pause_point`) and its caller gets :class:`~spacy_elmo.util.cancel.CallCancelled`.

    Pausing: ``run`` may call :meth:`pause_point` between its steps; once the batch has run ``slice_s`` seconds
    since it began or last paused (and, while calls keep arriving, its :data:`RUNNING_SHARE` of the time), the
    calls that arrived meanwhile whose items cost at most a quarter of its largest item (a sentence a quarter as
    long as the batch's longest), when they gain twice the waiting the batch's calls lose (see :meth:`pause_point`),
    run there, in a batch of their own planned as any other within its cost (a nested batch does not pause), and
    ``run`` goes on. Results are the same: each batch computes its items as it would alone.

    ``batches_run`` (batches that ran to the end), ``items_run`` and ``calls_cancelled`` count what the batcher has
    done, for a service's monitoring. Safe to use from several threads: that is its purpose. A copy or pickle gets a
    new, empty queue.
    """

    def __init__(
        self,
        run: Callable[[List[Any]], List[Any]],
        wait_ms: float = 0.0,
        max_batch_cost: Optional[int] = None,
        shared_batch_cost: Optional[int] = None,
        padded: bool = False,
        hold_s: float = DEFAULT_HOLD_S,
        slice_s: float = DEFAULT_SLICE_S,
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
        self.hold_s = hold_s
        self.slice_s = slice_s
        self._init_queue()

    def _init_queue(self) -> None:
        self._ready = threading.Condition()
        self._queue: List[_Request] = []  # calls not done, in the order they arrived
        self._leader: Optional[_Request] = None  # the call whose thread runs the current batch
        self._running: Optional[_Running] = None  # the batch the leader runs now, while it may pause
        self._turns = Turns()
        self._keys = itertools.count()
        self._arrivals = 0  # calls queued so far
        self.batches_run = self.items_run = self.calls_cancelled = 0

    def __getstate__(self) -> dict:  # a lock cannot be copied or pickled; a copy gets its own, empty queue
        return {
            "run": self.run,
            "wait_ms": self.wait_ms,
            "max_batch_cost": self.max_batch_cost,
            "shared_batch_cost": self.shared_batch_cost,
            "padded": self.padded,
            "hold_s": self.hold_s,
            "slice_s": self.slice_s,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_queue()

    @property
    def waiting_calls(self) -> int:
        """Calls queued and not answered yet (those in the running batch included)."""
        with self._ready:
            return len(self._queue)

    @property
    def leading(self) -> bool:
        """A caller's thread is planning or running a batch."""
        with self._ready:
            return self._leader is not None

    def __call__(self, items: Sequence[Any], merge: bool = True, cost: Optional[Callable[[Any], int]] = None) -> List[Any]:
        """``run``'s results for ``items``, one per item, computed in batches shared with the other waiting calls."""
        items = list(items)
        if not items:
            return []
        costs = [1] * len(items) if cost is None else [cost(item) for item in items]
        request = _Request(next(self._keys), items, merge, costs)
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
            while not request.done and not self._may_lead(request):
                self._ready.wait()
            if request.done:
                return False
            self._leader = request
            if self._queue[0].merge:
                self._wait_for_joiners(request)
                if request.done or not self._open_to(request):  # cancelled, or a call before it withdrew, meanwhile
                    self._leader = None
                    self._ready.notify_all()
                    return not request.done
            waiting = [call.waiting(self.max_batch_cost) for call in self._queue]
            plan = plan_batch(waiting, self._turns, self._budgets(), time.monotonic())
            batch = self._bind(plan)
            due = time.monotonic() + self.slice_s
            self._running = _Running(batch, self.padded, threading.get_ident(), due, self._arrivals)
        try:
            outcomes = self._run_batch(batch)
        except _Abandoned:  # its calls are all cancelled: they are done already
            outcomes = []
        finally:
            self._running = None
        with self._ready:
            self._commit(plan, outcomes)
        return True

    def pause_point(self) -> None:
        """Called by ``run`` between its steps: in the thread running a batch, once it has run ``slice_s`` since it
        began or last paused (and, since a pause, its :data:`RUNNING_SHARE` of the time), serve the calls that
        arrived meanwhile (those that may share a batch and are not in this one) whose next item costs at most a
        quarter of this batch's largest item, in one batch of their own costing no more than this one, then return
        so that ``run`` goes on. When every call of the batch was cancelled, stop it (``run`` is left by an exception
        the batcher catches). Anywhere else, nothing.

        Why these calls: a batch lasts about as long as its largest item (its LSTM steps), and a call arriving at
        a random moment would wait for half of it on average; served now, it waits for its own length instead, and
        each call of the running batch waits that long more. A call not served now shares the next batch at little
        cost, so a pause must gain twice what it costs: the calls at most a quarter as long are served, and only
        when they gain in all twice the waiting the batch's calls lose (``4 * longest * calls of the batch <=
        largest * newcomers``). A long call's batch pauses for short calls; a batch of short calls rarely pauses
        (with half instead of a quarter, 8 HTTP clients of short requests alone had a p95 25% higher)."""
        running = self._running
        if running is None or running.thread != threading.get_ident() or time.monotonic() < running.due:
            return
        abandoned = all(call.done for call in running.calls)
        if running.seen == self._arrivals and not abandoned:
            return  # no call arrived since the last look: no need of the lock
        if abandoned:
            raise _Abandoned()
        with self._ready:
            running.seen = self._arrivals
            nested = self._plan_nested(running)
        if not nested:
            return
        paused = time.monotonic()
        self._running = None  # a nested batch does not pause
        try:
            outcomes = self._run_batch(nested)
        finally:
            self._running = running
        with self._ready:
            self._deliver(outcomes)
        now = time.monotonic()
        running.due = now + max(self.slice_s, (now - paused) * RUNNING_SHARE / (1 - RUNNING_SHARE))

    def _plan_nested(self, running: _Running) -> List[_Share]:
        """The batch to run inside ``running`` (see :meth:`pause_point`); empty: none. Under the lock."""
        newcomers = [
            call
            for call in self._merging()
            if call not in running.calls and 4 * call.costs[call.next] <= running.largest
        ]
        longest = max((call.costs[call.next] for call in newcomers), default=0)
        if not newcomers or 4 * longest * len(running.calls) > running.largest * len(newcomers):
            return []  # none, or the batch's calls would lose more waiting than the newcomers gain
        most = running.cost if self.max_batch_cost is None else min(self.max_batch_cost, running.cost)
        budgets = Budgets(most, self.shared_batch_cost, self.padded, self.hold_s)
        waiting = [call.waiting(self.max_batch_cost) for call in newcomers]
        return self._bind(plan_batch(waiting, self._turns, budgets, time.monotonic()))

    def _budgets(self) -> Budgets:
        return Budgets(self.max_batch_cost, self.shared_batch_cost, self.padded, self.hold_s)

    def _bind(self, plan: Plan) -> List[_Share]:
        """The shares ``plan`` names, as calls and ranges of their items; nothing is marked. Under the lock."""
        calls: Dict[int, _Request] = {call.key: call for call in self._queue}
        return [(calls[key], calls[key].next, calls[key].next + count) for key, count in plan.shares]

    def _may_lead(self, request: _Request) -> bool:
        """Nobody leads, and ``request``'s thread may run the next batch."""
        return self._leader is None and self._open_to(request)

    def _open_to(self, request: _Request) -> bool:
        """The next batch is not another thread's ``merge=False`` call, which only its own caller runs (``request`` is
        queued)."""
        return self._queue[0].merge or self._queue[0] is request

    def _wait_for_joiners(self, request: _Request) -> None:
        """After a batch of several calls, wait up to ``wait_ms`` for as many to queue (also when a long call would fill
        the budget alone: the callers just answered then share the next batch instead of waiting for one more), unless
        the leader's own ``request`` is cancelled meanwhile."""
        deadline = time.monotonic() + self.wait_ms / 1000
        wanted = len(self._turns.last)
        while not request.done and len(self._merging()) < wanted and (left := deadline - time.monotonic()) > 0:
            self._ready.wait(left)

    def _merging(self) -> List[_Request]:
        end = next((i for i, call in enumerate(self._queue) if not call.merge), len(self._queue))
        return self._queue[:end]

    def _run_batch(self, batch: List[_Share]) -> List[_Outcome]:
        """Each share's results: all in one ``run``; on an error, each call's share alone."""
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

    def _run_alone(self, share: _Share) -> _Outcome:
        call, start, end = share
        try:
            return share, list(self.run(call.items[start:end])), None
        except Exception as err:
            return share, None, err

    def _commit(self, plan: Plan, outcomes: List[_Outcome]) -> None:
        """The batch ran (or stopped, all its calls cancelled: no outcomes): take the planner's turns, give each call
        its results or its error and let the next leader go. Under the lock."""
        self._turns = plan.turns
        if outcomes:  # none: the batch stopped, its calls all cancelled
            self._deliver(outcomes)
        self._leader = None
        self._ready.notify_all()

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
