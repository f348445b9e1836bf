"""The batch planner, a pure function: what the next batch holds, given the waiting calls' costs, the turns and the
budgets; each expected plan worked out by hand. No threads: the request batcher that runs it is in
test_request_batcher.py."""
from spacy_elmo.util.batch_planner import Budgets, Plan, Turns, Waiting, plan_batch

COUNTED = Budgets(most=10)  # each batch's cost: the sum of its items' costs
PADDED = Budgets(most=40, shared=10, padded=True, hold_s=2.0)  # rows times the largest


def test_calls_take_one_item_each_per_round_until_the_budget_is_spent():
    # Round 1: a 3, b 1, c 2 (6); round 2: a 3 (9), b 4 would make 13: skipped, c 1 (10); round 3: nothing fits.
    waiting = [Waiting("a", [3, 3, 3]), Waiting("b", [1, 4]), Waiting("c", [2, 1, 5])]
    plan = plan_batch(waiting, Turns(), COUNTED, now=0.0)
    assert plan.shares == (("a", 2), ("b", 1), ("c", 2))


def test_calls_without_a_share_of_the_batch_before_fill_the_batch_first():
    waiting = [Waiting("long", [4] * 5), Waiting("short", [4])]
    plan = plan_batch(waiting, Turns(last=("long",)), COUNTED, now=0.0)
    assert plan.shares == (("short", 1), ("long", 1)) and plan.turns.last == ("short", "long")


def test_padded_batches_cost_rows_times_the_largest_item():
    # Shared budget 10: an 8 alone (8); a 1 beside it would cost 2 * 8 = 16. The ones then fill 2 * 1 ... 10 * 1.
    waiting = [Waiting("long", [8, 8]), Waiting("short", [1] * 12)]
    first = plan_batch(waiting, Turns(), PADDED, now=0.0)
    assert first.shares == (("long", 1),)
    second = plan_batch([Waiting("long", [8]), Waiting("short", [1] * 12)], first.turns, PADDED, now=0.0)
    assert second.shares == (("short", 10),)


def test_a_batch_new_calls_start_is_not_lengthened_by_the_calls_served_before():
    # Shared budget 10, padded. The long call had the batch before; the short one is new and goes first (a 2).
    # The long call's 3 would lengthen the batch to 3 steps (2 * 3 = 6 <= 10, within the budget): it waits. Its
    # 2s do not lengthen it: 2, then 2 (4), then 2 (6)... up to 10 / 2 = 5 rows.
    turns = Turns(last=("long",), met=True, traffic_at=0.0)
    longer_first = plan_batch([Waiting("long", [3, 2, 2]), Waiting("short", [2])], turns, PADDED, now=0.0)
    assert longer_first.shares == (("short", 1),)
    as_long = plan_batch([Waiting("long", [2, 2, 2, 2, 2]), Waiting("short", [2])], turns, PADDED, now=0.0)
    assert as_long.shares == (("short", 1), ("long", 4))


def test_an_item_over_the_budget_is_a_batch_alone():
    assert plan_batch([Waiting("a", [50, 1])], Turns(), COUNTED, now=0.0).shares == (("a", 1),)


def test_a_call_that_does_not_merge_runs_whole_alone_and_stops_the_merging_at_it():
    waiting = [Waiting("state", [9, 9, 9], merge=False), Waiting("b", [1])]
    assert plan_batch(waiting, Turns(), COUNTED, now=0.0).shares == (("state", 3),)
    waiting = [Waiting("a", [1, 1]), Waiting("state", [1], merge=False), Waiting("b", [1])]
    assert plan_batch(waiting, Turns(), COUNTED, now=0.0).shares == (("a", 2),)


def test_calls_one_after_the_other_that_never_met_run_batches_of_the_most():
    first = plan_batch([Waiting("a", [1] * 100)], Turns(), PADDED, now=0.0)
    second = plan_batch([Waiting("b", [1] * 100)], first.turns, PADDED, now=0.5)
    assert first.shares == (("a", 40),) and second.shares == (("b", 40),) and not second.turns.met


def _lone_sizes(turns: Turns, key: str, times: list) -> list:
    """The batch sizes of call ``key`` alone (100 items costing 1), planned at ``times`` after ``turns``."""
    sizes = []
    for now in times:
        plan = plan_batch([Waiting(key, [1] * 100)], turns, PADDED, now=now)
        sizes.append(plan.shares[0][1])
        turns = plan.turns
    return sizes


def test_after_calls_met_a_call_alone_keeps_shared_batches_while_held_then_doubles_them():
    """Met at t=5 (two calls waiting); alone at t=6 (held: 10); from t=7 on, the hold over: 10, 20, 40, 40."""
    met = plan_batch([Waiting("a", [1] * 100), Waiting("b", [1])], Turns(), PADDED, now=5.0)
    assert met.turns.met and sum(count for _, count in met.shares) == 10
    assert _lone_sizes(met.turns, "a", [6.0, 7.0, 7.1, 7.2, 7.3]) == [10, 10, 20, 40, 40]


def test_after_calls_met_a_new_call_alone_is_traffic_and_keeps_shared_batches():
    """Met at t=5; "c", a new call, starts alone at t=20, long after the hold: a request of light traffic ran just
    before it, so the hold starts again (10 until t=22, then doubling)."""
    met = plan_batch([Waiting("a", [1]), Waiting("b", [1])], Turns(), PADDED, now=5.0)
    assert _lone_sizes(met.turns, "c", [20.0, 21.0, 22.0, 22.1]) == [10, 10, 10, 20]


def test_planning_changes_nothing_so_a_plan_not_run_is_planned_again_the_same():
    waiting = [Waiting("a", [3, 3, 3]), Waiting("b", [1, 4])]
    turns = Turns(last=("a",), met=True, traffic_at=1.0)
    first = plan_batch(waiting, turns, COUNTED, now=1.5)
    assert plan_batch(waiting, turns, COUNTED, now=1.5) == first
    assert turns == Turns(last=("a",), met=True, traffic_at=1.0) and waiting[0].costs == [3, 3, 3]


def test_nothing_waiting_plans_an_empty_batch():
    assert plan_batch([], Turns(), COUNTED, now=0.0) == Plan((), Turns())
