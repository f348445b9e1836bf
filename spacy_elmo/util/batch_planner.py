"""What the next batch holds when several callers' items wait: :func:`plan_batch`, a pure function.

A model shared between threads runs one batch at a time. Which items the next batch holds decides both how much a
batch wastes (padding) and how long a short call waits behind a long one, so it is decided in one place: here. The
planner sees only numbers (each waiting item's cost) and returns how many of each call's next items the batch takes
and the state the batch after it starts from; it changes nothing, so a caller that never runs the batch (an
interrupt) has nothing to undo. :class:`~spacy_elmo.util.request_batcher.RequestBatcher` runs it under its lock.

Cost model, defined once (:func:`batch_cost`): a padded batch (sequences padded to the longest) costs its number
of items times its largest item's cost; otherwise the sum of its items' costs.
"""
import math
from dataclasses import dataclass
from typing import Hashable, List, Optional, Sequence, Tuple


# How long after calls last waited together a call alone keeps shared-size batches: another call may come. Long
# enough to span the gaps of light traffic (a request every 0.5 s: a gap of 2 s in 2% of Poisson arrivals).
DEFAULT_HOLD_S = 2.0


@dataclass(frozen=True)
class Budgets:
    """The bounds on one batch's cost. ``most``: any batch (None: no bound); ``shared``: a batch while calls wait
    together or may soon (None: ``most``), so that each batch, hence a short call's wait behind a long one, is
    short; ``hold_s``: how long after calls last waited together a call alone keeps to ``shared`` before its
    batches grow back to ``most``; ``padded``: the cost model (see :func:`batch_cost`)."""

    most: Optional[int] = None
    shared: Optional[int] = None
    padded: bool = False
    hold_s: float = DEFAULT_HOLD_S


@dataclass(frozen=True)
class Waiting:
    """One queued call as the planner sees it: its key, the costs of its items not yet run (in the order they run)
    and whether it may share a batch (``merge=False``: it runs whole and alone, in its turn)."""

    key: Hashable
    costs: Sequence[int]
    merge: bool = True


@dataclass(frozen=True)
class Turns:
    """What the planner carries from one batch to the next: the calls that had a share of the batch before (served
    after the others), whether calls have ever waited together, the last time there was traffic (calls waiting
    together, or a batch for another call than the batch before: a new call) and how many batches a call has had
    alone since the hold after that ran out.

    Before calls ever meet (a script), a call runs batches of ``Budgets.most``, the same pieces whatever ran
    before. Once they have (a service), every batch keeps to ``Budgets.shared`` while there is traffic and for
    ``Budgets.hold_s`` after, so that a short call arriving in a service's traffic, however light, waits at most one
    shared-size batch behind a long one; then a call alone doubles its batches with each one it runs, up to
    ``Budgets.most``."""

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


def batch_cost(rows: int, largest: int, total: int, padded: bool) -> int:
    """What a batch of ``rows`` items costs: ``rows * largest`` padded, else ``total`` (the sum of their costs)."""
    return rows * largest if padded else total


def budget(budgets: Budgets, turns: Turns, now: float) -> float:
    """The bound of the next batch, planned at ``now`` after ``turns`` (see :class:`Turns`)."""
    most = math.inf if budgets.most is None else budgets.most
    if budgets.shared is None or not turns.met:
        return most
    return min(most, budgets.shared * (1 if _held(budgets, turns, now) else 2 ** min(turns.lone_runs, 64)))


def _held(budgets: Budgets, turns: Turns, now: float) -> bool:
    """There was traffic less than ``hold_s`` ago."""
    return turns.traffic_at is not None and now - turns.traffic_at < budgets.hold_s


def plan_batch(waiting: Sequence[Waiting], turns: Turns, budgets: Budgets, now: float) -> Plan:
    """The next batch of the ``waiting`` calls (oldest first, none without items) after ``turns``, at time ``now``
    (seconds, any clock that only goes forward).

    A call that does not merge, at the head, runs whole and alone. Otherwise the calls before the first that does
    not merge share the batch: first those without a share of the batch before, then the others (oldest first in
    each), one item of each per round, as long as the batch's cost stays within the budget, so that a long call and
    the short calls around it take turns. A first item costing more than the budget runs alone.
    """
    if not waiting:
        return Plan((), turns)
    head = waiting[0]
    if not head.merge:
        return Plan(((head.key, len(head.costs)),), Turns((), turns.met, turns.traffic_at, turns.lone_runs))
    end = next((i for i, call in enumerate(waiting) if not call.merge), len(waiting))
    served = set(turns.last)
    calls = [c for c in waiting[:end] if c.key not in served] + [c for c in waiting[:end] if c.key in served]
    together = len(calls) > 1
    if together or calls[0].key not in served:
        turns = Turns(turns.last, turns.met or together, now, 0)
    bound = budget(budgets, turns, now)
    lone_runs = 0 if _held(budgets, turns, now) else turns.lone_runs + 1
    # A batch that new calls start is as long as their items need: a call served in the batch before joins it only
    # with items that do not lengthen it, so a short call arriving beside a long one waits for the batch in
    # progress and then for its own length, not for a shared-size batch of the long one's.
    newcomers_first = budgets.padded and together and calls[0].key not in served
    taken: List[int] = [0] * len(calls)
    rows = total = largest = 0
    added = True
    while added:
        added = False
        for n, call in enumerate(calls):
            if taken[n] == len(call.costs):
                continue
            cost = call.costs[taken[n]]
            if rows and batch_cost(rows + 1, max(largest, cost), total + cost, budgets.padded) > bound:
                continue
            if rows and newcomers_first and call.key in served and cost > largest:
                continue
            rows, total, largest = rows + 1, total + cost, max(largest, cost)
            taken[n] += 1
            added = True
    shares = tuple((call.key, count) for call, count in zip(calls, taken) if count)
    return Plan(shares, Turns(tuple(key for key, _ in shares), turns.met, turns.traffic_at, lone_runs))
