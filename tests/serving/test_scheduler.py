"""The scheduler, pure functions: what the next batch holds, how long a leader waits for joiners, whether and to
whom a running batch gives way and when, what runs again after an error, given the waiting calls' tokens, the turns,
the policy and the time; each expected decision worked out by hand. No threads: the request batcher that runs the
plans is in test_request_batcher.py."""
import pytest

from spacy_elmo.serving.scheduler import (
    Plan,
    Policy,
    Running,
    Turns,
    Waiting,
    after_failure,
    join_wait,
    lone_batches,
    pause_due,
    plan_batch,
    plan_pause,
    running,
)

COUNTED = Policy(max_batch_tokens=10)  # each batch's tokens: the sum of its items' tokens
PADDED = Policy(max_batch_tokens=40, shared_batch_tokens=10, padded=True, hold_s=2.0)  # rows times the largest


# --- what the next batch holds ---


def test_calls_take_one_item_each_per_round_until_the_budget_is_spent():
    # Round 1: a 3, b 1, c 2 (6); round 2: a 3 (9), b 4 would make 13: skipped, c 1 (10); round 3: nothing fits.
    waiting = [Waiting("a", [3, 3, 3]), Waiting("b", [1, 4]), Waiting("c", [2, 1, 5])]
    plan = plan_batch(waiting, Turns(), COUNTED, now=0.0)
    assert plan.shares == (("a", 2), ("b", 1), ("c", 2))


def test_calls_without_a_share_of_the_batch_before_fill_the_batch_first():
    waiting = [Waiting("long", [4] * 5), Waiting("short", [4])]
    plan = plan_batch(waiting, Turns(last=("long",)), COUNTED, now=0.0)
    assert plan.shares == (("short", 1), ("long", 1)) and plan.turns.last == ("short", "long")


def test_padded_batches_have_rows_times_the_largest_item_s_tokens():
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
    """The batch sizes of call ``key`` alone (100 items of 1 token), planned at ``times`` after ``turns``."""
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
    assert turns == Turns(last=("a",), met=True, traffic_at=1.0) and waiting[0].tokens == [3, 3, 3]


def test_nothing_waiting_plans_an_empty_batch():
    assert plan_batch([], Turns(), COUNTED, now=0.0) == Plan((), Turns())


def test_a_batch_in_progress_has_its_shares_keys_largest_item_and_tokens():
    # a's first two items (3, 5) and b's (4): largest 5; padded 3 rows * 5, else 3 + 5 + 4.
    waiting = [Waiting("a", [3, 5, 7]), Waiting("b", [4])]
    plan = Plan((("a", 2), ("b", 1)), Turns())
    assert running(plan, waiting, padded=True) == Running(frozenset({"a", "b"}), 5, 15)
    assert running(plan, waiting, padded=False) == Running(frozenset({"a", "b"}), 5, 12)


def test_one_call_alone_runs_largest_first_in_batches_under_the_bound():
    # Padded tokens 7, 32, 4, 32, 9, 3, 2 under 64: the two 32s fill 64; the rest fit 5 * 9 = 45.
    assert lone_batches([7, 32, 4, 32, 9, 3, 2], max_batch_tokens=64) == [[1, 3], [4, 0, 2, 5, 6]]


def test_one_call_alone_runs_an_item_over_the_bound_alone():
    assert lone_batches([52, 3], 10) == [[0], [1]]



@pytest.mark.parametrize("settings", [{"batch_wait_ms": -1}, {"batch_wait_ms": "5"}, {"batch_wait_ms": True},
                                      {"max_batch_tokens": 0}, {"max_batch_tokens": 2.5}, {"max_batch_tokens": True},
                                      {"shared_batch_tokens": 0}])
def test_bad_policies_are_refused(settings):
    with pytest.raises(ValueError, match=next(iter(settings))):
        Policy(**settings)


# --- how long a leader waits for calls to join ---

WAITING_5_MS = Policy(batch_wait_ms=5)


def test_after_a_batch_of_three_a_leader_alone_waits_what_is_left_of_the_wait():
    after_three = Turns(last=("a", "b", "c"))
    assert join_wait(after_three, 1, WAITING_5_MS, waited_s=0.0) == pytest.approx(0.005)
    assert join_wait(after_three, 2, WAITING_5_MS, waited_s=0.003) == pytest.approx(0.002)
    assert join_wait(after_three, 1, WAITING_5_MS, waited_s=0.01) == 0.0


def test_a_leader_waits_for_nobody_once_as_many_calls_wait_after_a_lone_batch_or_before_a_call_alone():
    assert join_wait(Turns(last=("a", "b", "c")), 3, WAITING_5_MS, waited_s=0.0) == 0.0
    assert join_wait(Turns(last=("a",)), 1, WAITING_5_MS, waited_s=0.0) == 0.0
    assert join_wait(Turns(last=("a", "b")), 0, WAITING_5_MS, waited_s=0.0) == 0.0  # a call that does not merge


# --- whether and to whom a running batch gives way, and when ---

LONG_BATCH = Running(frozenset({"long"}), largest=20, tokens=20)
NO_BOUND = Policy()


def test_a_running_batch_gives_way_only_to_calls_at_most_a_quarter_as_long_as_its_largest_item():
    # 4 * 6 = 24 > 20: waits; 4 * 5 = 20: served (and gains 20 <= 20 * 1, twice what the one call loses).
    waiting = [Waiting("long", [20]), Waiting("six", [6]), Waiting("five", [5])]
    assert plan_pause(LONG_BATCH, waiting, Turns(), NO_BOUND, now=0.0).shares == (("five", 1),)
    assert plan_pause(LONG_BATCH, waiting[:2], Turns(), NO_BOUND, now=0.0).shares == ()


def test_a_batch_of_several_calls_gives_way_only_when_the_newcomers_gain_twice_what_its_calls_lose():
    # Two calls of 20 running: one newcomer of 5 gives 4 * 5 * 2 = 40 > 20 * 1; two give 40 <= 20 * 2.
    shared = Running(frozenset({"x", "y"}), largest=20, tokens=40)
    one = [Waiting("x", [20]), Waiting("y", [20]), Waiting("c", [5])]
    assert plan_pause(shared, one, Turns(), NO_BOUND, now=0.0).shares == ()
    two = [*one, Waiting("d", [5])]
    assert plan_pause(shared, two, Turns(), NO_BOUND, now=0.0).shares == (("c", 1), ("d", 1))


def test_the_batch_given_way_to_is_planned_within_the_running_batch_s_tokens_and_the_bound():
    # Within 20: 5, 4 (9), 5 (14), 4 (18); the third 5 would make 23. Within a bound of 10: 5, 4; a 5 would make 14.
    waiting = [Waiting("long", [20]), Waiting("c", [5, 5, 5]), Waiting("d", [4, 4])]
    assert plan_pause(LONG_BATCH, waiting, Turns(), NO_BOUND, now=0.0).shares == (("c", 2), ("d", 2))
    assert plan_pause(LONG_BATCH, waiting, Turns(), COUNTED, now=0.0).shares == (("c", 1), ("d", 1))


def test_a_running_batch_does_not_give_way_to_calls_behind_one_that_does_not_merge():
    waiting = [Waiting("long", [20]), Waiting("state", [1], merge=False), Waiting("b", [1])]
    assert plan_pause(LONG_BATCH, waiting, Turns(), NO_BOUND, now=0.0).shares == ()


def test_a_batch_may_give_way_a_slice_after_it_starts_and_after_a_pause_keeps_its_share_of_the_time():
    policy = Policy(slice_s=0.02)
    assert pause_due(policy, now=1.0) == pytest.approx(1.02)
    assert pause_due(policy, now=2.0, paused_s=0.1) == pytest.approx(2.0 + 0.1 * 0.8 / 0.2)  # 80% of the time
    assert pause_due(policy, now=2.0, paused_s=0.001) == pytest.approx(2.02)  # never less than a slice


# --- what runs again after an error ---


def test_after_an_error_each_share_of_a_batch_runs_again_alone():
    turns = Turns(last=("a", "b"))
    plan = Plan((("a", 2), ("b", 1)), turns)
    assert after_failure(plan) == (Plan((("a", 2),), turns), Plan((("b", 1),), turns))


def test_after_an_error_a_batch_of_one_share_runs_nothing_again():
    assert after_failure(Plan((("a", 3),), Turns())) == ()
