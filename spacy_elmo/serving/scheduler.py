"""Every decision of the request path, as pure functions of numbers: the scheduler.

A model shared between threads runs one batch at a time. What the next batch holds (:func:`plan_batch`), the bound on
its tokens and the hold after traffic (:func:`budget`), how long a leader waits for calls to join it
(:func:`join_wait`), whether a running batch gives way and to whom (:func:`plan_pause`), when it may next
(:func:`pause_due`) and what runs again after a batch raised (:func:`after_failure`) are decided here, from the
waiting calls' tokens, the :class:`Turns` carried from batch to batch, the :class:`Policy` and the time, as vLLM's
scheduler decides each step. Nothing here changes anything, so a caller that never runs a plan (an interrupt) has
nothing to undo. :class:`~spacy_elmo.serving.request_batcher.RequestBatcher` keeps the queue, the lock and the leader,
and runs and commits the plans; :func:`lone_batches` is the plan of one call alone (evaluation in pretraining, runs
with autograd).

Cost model, defined once (:func:`batch_tokens`): a padded batch (items padded to the longest) costs its number of
items times its largest item's tokens; otherwise the sum of its items' tokens.
"""
import math
from dataclasses import dataclass, replace
from typing import FrozenSet, Hashable, List, Optional, Sequence, Tuple

import numpy as np

from ..util.numbers import is_number

# How long after calls last waited together a call alone keeps shared-size batches: another call may come. Long
# enough to span the gaps of light traffic (a request every 0.5 s: a gap of 2 s in 2% of Poisson arrivals).
DEFAULT_HOLD_S = 2.0

# How long a batch runs at least, from its start or its last pause, before it gives way to calls that arrived while
# it runs: a short call's wait behind a long batch, and the long batch's least share of the time while calls keep
# arriving (a one-row step of the embedded model takes about 0.2 ms).
DEFAULT_SLICE_S = 0.02

# While calls keep arriving, the share of the time a running batch keeps between its pauses: after a pause of ``d``
# it runs ``d * share / (1 - share)`` before the next. Calls arriving then wait longer, the batch's calls less: with
# seven threads of one-sentence calls beside a 30,000-word text, shares of 0.5, 0.67 and 0.8 took the text 25-26,
# 20-21 and 17-19 s (13-14 s without pauses), the short calls' p95 102-107, 132-140 and 136-145 ms (145-149 ms).
RUNNING_SHARE = 0.8

# The give-way ratio of :func:`plan_pause`. With 2 instead of 4, 8 HTTP clients of short requests alone had a p95
# 25% higher.
GIVE_WAY = 4


@dataclass(frozen=True)
class Policy:
    """What the scheduler decides by. ``max_batch_tokens``: the bound on any batch's tokens (None: none);
    ``shared_batch_tokens``: on a batch while calls wait together or may soon (None: ``max_batch_tokens``), so that
    each batch, hence a short call's wait behind a long one, is short; ``padded``: the cost model (see
    :func:`batch_tokens`); ``hold_s``: how long after traffic a call alone keeps to ``shared_batch_tokens`` before
    its batches grow back (see :class:`Turns`); ``batch_wait_ms``: how long a leader waits for calls to join it
    (see :func:`join_wait`); ``slice_s``: how long a batch runs at least before it gives way (see
    :func:`pause_due`)."""

    max_batch_tokens: Optional[int] = None
    shared_batch_tokens: Optional[int] = None
    padded: bool = False
    hold_s: float = DEFAULT_HOLD_S
    batch_wait_ms: float = 0.0
    slice_s: float = DEFAULT_SLICE_S

    def __post_init__(self) -> None:
        if not is_number(self.batch_wait_ms) or not self.batch_wait_ms >= 0:
            raise ValueError(f"batch_wait_ms must be a number of milliseconds >= 0, found {self.batch_wait_ms!r}")
        for name in ("max_batch_tokens", "shared_batch_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, found {value!r}")


@dataclass(frozen=True)
class Waiting:
    """One queued call as the scheduler sees it: its key, the tokens of its items not yet run (in the order they
    run) and whether it may share a batch (``merge=False``: it runs whole and alone, in its turn)."""

    key: Hashable
    tokens: Sequence[int]
    merge: bool = True


@dataclass(frozen=True)
class Turns:
    """What the scheduler carries from one batch to the next: the calls that had a share of the batch before (served
    after the others), whether calls have ever waited together, the last time there was traffic (calls waiting
    together, or a batch for another call than the batch before: a new call) and how many batches a call has had
    alone since the hold after that ran out.

    Before calls ever meet (a script), a call runs batches of ``max_batch_tokens``, the same pieces whatever ran
    before. Once they have (a service), every batch keeps to ``shared_batch_tokens`` while there is traffic and for
    ``hold_s`` after, so that a short call arriving in a service's traffic, however light, waits at most one
    shared-size batch behind a long one; then a call alone doubles its batches with each one it runs, up to
    ``max_batch_tokens``."""

    last: Tuple[Hashable, ...] = ()
    met: bool = False
    traffic_at: Optional[float] = None
    lone_runs: int = 0


@dataclass(frozen=True)
class Plan:
    """The next batch: ``(key, count)`` for each call with a share, in the order the shares fill the batch (each
    share is the call's next ``count`` items), and the :class:`Turns` to commit once the batch has run."""

    shares: Tuple[Tuple[Hashable, int], ...]
    turns: Turns


@dataclass(frozen=True)
class Running:
    """A batch in progress as the scheduler sees it: its calls' keys, its largest item's tokens and its tokens."""

    keys: FrozenSet[Hashable]
    largest: int
    tokens: int


def batch_tokens(rows: int, largest: int, total: int, padded: bool) -> int:
    """What a batch of ``rows`` items costs: ``rows * largest`` padded, else ``total`` (the sum of their tokens)."""
    return rows * largest if padded else total


def budget(policy: Policy, turns: Turns, now: float) -> float:
    """The bound on the tokens of the next batch, planned at ``now`` after ``turns`` (see :class:`Turns`)."""
    most = math.inf if policy.max_batch_tokens is None else policy.max_batch_tokens
    if policy.shared_batch_tokens is None or not turns.met:
        return most
    return min(most, policy.shared_batch_tokens * (1 if _held(policy, turns, now) else 2 ** min(turns.lone_runs, 64)))


def _held(policy: Policy, turns: Turns, now: float) -> bool:
    """There was traffic less than ``hold_s`` ago."""
    return turns.traffic_at is not None and now - turns.traffic_at < policy.hold_s


def _merging(waiting: Sequence[Waiting]) -> Sequence[Waiting]:
    """The calls that may share the next batch: those before the first that does not merge."""
    end = next((i for i, call in enumerate(waiting) if not call.merge), len(waiting))
    return waiting[:end]


def plan_batch(waiting: Sequence[Waiting], turns: Turns, policy: Policy, now: float) -> Plan:
    """The next batch of the ``waiting`` calls (oldest first, none without items) after ``turns``, at time ``now``
    (seconds, any clock that only goes forward).

    A call that does not merge, at the head, runs whole and alone. Otherwise the calls before the first that does
    not merge share the batch: first those without a share of the batch before, then the others (oldest first in
    each), one item of each per round, as long as the batch's tokens stay within the :func:`budget`, so that a long
    call and the short calls around it take turns. A first item over the budget runs alone.
    """
    if not waiting:
        return Plan((), turns)
    head = waiting[0]
    if not head.merge:
        return Plan(((head.key, len(head.tokens)),), Turns((), turns.met, turns.traffic_at, turns.lone_runs))
    served = set(turns.last)
    merging = _merging(waiting)
    calls = [c for c in merging if c.key not in served] + [c for c in merging if c.key in served]
    together = len(calls) > 1
    if together or calls[0].key not in served:
        turns = Turns(turns.last, turns.met or together, now, 0)
    bound = budget(policy, turns, now)
    lone_runs = 0 if _held(policy, turns, now) else turns.lone_runs + 1
    # A batch that new calls start is as long as their items need: a call served in the batch before joins it only
    # with items that do not lengthen it, so a short call arriving beside a long one waits for the batch in
    # progress and then for its own length, not for a shared-size batch of the long one's.
    newcomers_first = policy.padded and together and calls[0].key not in served
    taken: List[int] = [0] * len(calls)
    rows = total = largest = 0
    added = True
    while added:
        added = False
        for n, call in enumerate(calls):
            if taken[n] == len(call.tokens):
                continue
            tokens = call.tokens[taken[n]]
            if rows and batch_tokens(rows + 1, max(largest, tokens), total + tokens, policy.padded) > bound:
                continue
            if rows and newcomers_first and call.key in served and tokens > largest:
                continue
            rows, total, largest = rows + 1, total + tokens, max(largest, tokens)
            taken[n] += 1
            added = True
    shares = tuple((call.key, count) for call, count in zip(calls, taken) if count)
    return Plan(shares, Turns(tuple(key for key, _ in shares), turns.met, turns.traffic_at, lone_runs))


def running(plan: Plan, waiting: Sequence[Waiting], padded: bool) -> Running:
    """The batch ``plan`` makes of the ``waiting`` calls it was planned from, once it runs."""
    calls = {call.key: call for call in waiting}
    items = [tokens for key, count in plan.shares for tokens in calls[key].tokens[:count]]
    largest = max(items, default=0)
    return Running(frozenset(key for key, _ in plan.shares), largest, batch_tokens(len(items), largest, sum(items), padded))


def join_wait(turns: Turns, merging: int, policy: Policy, waited_s: float) -> float:
    """How much longer a leader waits for calls to join the next batch, ``waited_s`` after it began to, with
    ``merging`` calls queued that may share it (0: the next call runs alone). After a batch of several calls (the
    callers are concurrent), up to ``batch_wait_ms`` for as many to queue, so that the callers just answered, who
    call again, join it instead of running alone or, behind a long call, waiting for one more batch (also when the
    long call would fill the budget alone); a lone caller never waits. 0: plan now."""
    if merging == 0 or merging >= len(turns.last):
        return 0.0
    return max(0.0, policy.batch_wait_ms / 1000 - waited_s)


def plan_pause(batch: Running, waiting: Sequence[Waiting], turns: Turns, policy: Policy, now: float) -> Plan:
    """The batch that the running ``batch`` gives way to at a pause, at ``now``, of the ``waiting`` calls (no
    shares: none); its turns are not committed (the running batch's are).

    A batch lasts about as long as its largest item, and a call arriving at a random moment would wait for half
    of it on average; served at a pause, it waits for its own length instead, and each call of the running batch
    waits that long more. A call not served then shares the next batch at little cost, so a pause must gain
    twice what it costs: the calls that may share a batch and are not in this one, whose next item has at most
    1/:data:`GIVE_WAY` of the batch's largest item's tokens, are served, and only when they gain in all twice the
    waiting the batch's calls lose (``GIVE_WAY * longest * calls of the batch <= largest * newcomers``), in one
    batch planned as any other within the running batch's tokens. A long call's batch pauses for short calls; a
    batch of short calls rarely pauses."""
    newcomers = [
        call for call in _merging(waiting) if call.key not in batch.keys and GIVE_WAY * call.tokens[0] <= batch.largest
    ]
    longest = max((call.tokens[0] for call in newcomers), default=0)
    if not newcomers or GIVE_WAY * longest * len(batch.keys) > batch.largest * len(newcomers):
        return Plan((), turns)
    most = batch.tokens if policy.max_batch_tokens is None else min(policy.max_batch_tokens, batch.tokens)
    return plan_batch(newcomers, turns, replace(policy, max_batch_tokens=most), now)


def pause_due(policy: Policy, now: float, paused_s: float = 0.0) -> float:
    """When a batch running at ``now`` may next give way: ``slice_s`` on, and after a pause of ``paused_s`` that
    ended at ``now``, not before it has had its :data:`RUNNING_SHARE` of the time since the pause began."""
    return now + max(policy.slice_s, paused_s * RUNNING_SHARE / (1 - RUNNING_SHARE))


def after_failure(plan: Plan) -> Tuple[Plan, ...]:
    """What runs again after ``plan``'s batch raised an error: each share alone, so that each call gets its results
    or the error its own items raise; nothing after a batch of one share (the error is its call's, and a call that
    fails is done: its items not yet run never run)."""
    return () if len(plan.shares) == 1 else tuple(Plan((share,), plan.turns) for share in plan.shares)


def longest_first(tokens: Sequence[int]) -> List[int]:
    """Indices of ``tokens``, largest first (ties in their order), so that items of similar size share a batch and
    little of it is padding."""
    return np.argsort(-np.asarray(tokens, dtype=np.int64), kind="stable").tolist()


def lone_batches(tokens: Sequence[int], max_batch_tokens: int) -> List[List[int]]:
    """One call alone, its items of ``tokens`` largest first, in padded batches of at most ``max_batch_tokens``
    tokens (an item over it is a batch alone): the indices of each batch's items."""
    order = longest_first(tokens)
    policy = Policy(max_batch_tokens=max_batch_tokens, padded=True)
    batches: List[List[int]] = []
    at = 0
    while at < len(order):
        # a batch holds at most max_batch_tokens items: the scheduler needs to see no more
        plan = plan_batch([Waiting(0, [tokens[i] for i in order[at : at + max_batch_tokens]])], Turns(), policy, 0.0)
        batches.append(order[at : at + plan.shares[0][1]])
        at += len(batches[-1])
    return batches

