"""The catch-up plan: skip / latest / all, grace, max lateness, the per-tick bound."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from fleet.timing.catchup import StaleRun, plan_slots, settle_stale
from fleet.timing.schedfile import CatchUp
from fleet.timing.schedule import Timing
from tests.support import slowness

UTC = UTC
T = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
Q = Timing(every=timedelta(minutes=15))


def at(minute: int, second: int = 0) -> datetime:
    return T + timedelta(minutes=minute, seconds=second)


def test_outage_example_from_the_design() -> None:
    # Outage 10:02-10:52: missed 10:15, 10:30, 10:45.
    for policy, expected in (("skip", []), ("latest", [at(45)]), ("all", [at(15), at(30), at(45)])):
        plan = plan_slots(Q, policy, at(15), at(52), grace=None, max_lateness=None, limit=100)  # type: ignore[arg-type]
        assert plan.run == expected, policy
        assert plan.next_run_at == at(60)
    assert plan_slots(Q, "skip", at(15), at(52), grace=None, max_lateness=None, limit=100).missed == 3
    assert plan_slots(Q, "latest", at(15), at(52), grace=None, max_lateness=None, limit=100).missed == 2


def test_a_slot_within_grace_is_on_time_for_every_policy() -> None:
    for policy in ("skip", "latest", "all"):
        plan = plan_slots(Q, policy, at(15), at(15, 30), grace=None, max_lateness=None, limit=10)
        assert plan.run == [at(15)] and plan.missed == 0
        assert plan.next_run_at == at(30)


def test_default_grace_is_half_the_interval_when_short() -> None:
    every10s = Timing(every=timedelta(seconds=10))
    start = T
    assert plan_slots(
        every10s, "skip", start, start + timedelta(seconds=4), grace=None, max_lateness=None, limit=10
    ).run == [start]
    assert (
        plan_slots(
            every10s, "skip", start, start + timedelta(seconds=6), grace=None, max_lateness=None, limit=10
        ).run
        == []
    )


def test_latest_prefers_an_on_time_slot_over_missed_ones() -> None:
    plan = plan_slots(Q, "latest", at(15), at(60, 20), grace=None, max_lateness=None, limit=10)
    assert plan.run == [at(60)] and plan.missed == 3


def test_max_lateness_records_old_slots_as_skipped() -> None:
    plan = plan_slots(Q, "all", at(15), at(52), grace=None, max_lateness=timedelta(minutes=20), limit=10)
    assert plan.run == [at(45)]
    assert [s for s, _ in plan.skipped] == [at(15), at(30)]
    late = plan_slots(Q, "latest", at(15), at(52), grace=None, max_lateness=timedelta(minutes=5), limit=10)
    assert late.run == [] and [s for s, _ in late.skipped] == [at(45)]


def test_all_is_bounded_per_tick_and_resumes() -> None:
    sec = Timing(every=timedelta(seconds=1))
    plan = plan_slots(sec, "all", T, T + timedelta(hours=1), grace=None, max_lateness=None, limit=500)
    assert len(plan.run) == 500 and plan.next_run_at == T + timedelta(seconds=500)


def test_nothing_due_changes_nothing() -> None:
    plan = plan_slots(Q, "all", at(15), at(14), grace=None, max_lateness=None, limit=10)
    assert plan.run == [] and plan.next_run_at == at(15)


def test_a_week_of_one_second_slots_under_skip_is_cheap() -> None:
    sec = Timing(every=timedelta(seconds=1))
    plan = plan_slots(sec, "skip", T, T + timedelta(days=7), grace=None, max_lateness=None, limit=1000)
    assert plan.run == [T + timedelta(days=7)]
    assert plan.next_run_at == T + timedelta(days=7, seconds=1)


def test_all_catches_up_at_most_max_catchup_slots_however_long_ago_they_were() -> None:
    # a start_at typo a year back, every second, under `all`: the newest 100 slots are run, the
    # others counted missed (exactly, for an interval), not created
    every1s = Timing(every=timedelta(seconds=1))
    now = T + timedelta(seconds=0.2)
    plan = plan_slots(every1s, "all", T - timedelta(days=365), now, grace=None, max_lateness=None,
                      limit=1000, max_catchup=100)  # fmt: skip
    assert len(plan.run) == 100 and plan.run[-1] == T
    assert plan.missed == 365 * 86400 + 1 - 100
    assert plan.next_run_at == T + timedelta(seconds=1)
    # within the bound nothing changes: the outage example still runs its three slots
    plan = plan_slots(Q, "all", at(15), at(52), grace=None, max_lateness=None, limit=100, max_catchup=3)
    assert plan.run == [at(15), at(30), at(45)] and plan.missed == 0
    plan = plan_slots(Q, "all", at(15), at(52), grace=None, max_lateness=None, limit=100, max_catchup=1)
    assert plan.run == [at(45)] and plan.missed == 2


def test_the_lookahead_adds_the_slots_ahead_once_the_past_is_planned() -> None:
    ahead = timedelta(minutes=20)
    # Nothing due yet: the slots within the lookahead only.
    plan = plan_slots(Q, "skip", at(15), at(0), grace=None, max_lateness=None, limit=100, lookahead=ahead)
    assert (plan.run, plan.missed, plan.next_run_at) == ([at(15)], 0, at(30))
    # After an outage: the policy over the past, then the slots ahead, never counted as missed.
    cases: tuple[tuple[CatchUp, list[datetime], int], ...] = (
        ("skip", [], 3),
        ("latest", [at(45)], 2),
        ("all", [at(15), at(30), at(45)], 0),
    )
    for policy, past, missed in cases:
        plan = plan_slots(
            Q, policy, at(15), at(52), grace=None, max_lateness=None, limit=100, lookahead=ahead
        )
        assert (plan.run, plan.missed, plan.next_run_at) == ([*past, at(60)], missed, at(75)), policy
    # A slot ahead is never late, whatever max_lateness says.
    plan = plan_slots(
        Q, "all", at(15), at(52), grace=None, max_lateness=timedelta(minutes=1), limit=100, lookahead=ahead
    )
    assert plan.run == [at(60)] and [s for s, _ in plan.skipped] == [at(15), at(30), at(45)]


def test_the_limit_bounds_past_and_ahead_together_and_the_past_goes_first() -> None:
    sec = Timing(every=timedelta(seconds=1))
    ahead = timedelta(seconds=30)
    # A catch-up cut short by the limit creates nothing ahead: next_run_at stays in the past.
    plan = plan_slots(
        sec, "all", T, T + timedelta(seconds=20), grace=None, max_lateness=None, limit=10, lookahead=ahead
    )
    assert len(plan.run) == 10 and plan.next_run_at == T + timedelta(seconds=10)
    # The rest of the limit goes to slots ahead; next_run_at stays within the horizon.
    plan = plan_slots(
        sec, "all", T, T + timedelta(seconds=5), grace=None, max_lateness=None, limit=10, lookahead=ahead
    )
    assert plan.run == [T + timedelta(seconds=k) for k in range(10)]
    assert plan.next_run_at == T + timedelta(seconds=10)
    # Zero lookahead: the plan of old.
    plain = plan_slots(sec, "all", T, T + timedelta(seconds=5), grace=None, max_lateness=None, limit=10)
    assert plain.run == [T + timedelta(seconds=k) for k in range(6)] and plain.next_run_at == T + timedelta(
        seconds=6
    )


# -- the far ends of what apply accepts ------------------------------------------------------------

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_a_leap_day_cron_caught_up_from_years_back_does_not_overflow() -> None:
    leap = Timing(cron="0 0 29 2 *")
    plan = plan_slots(leap, "all", datetime(2004, 2, 29, tzinfo=UTC), NOW, grace=None, max_lateness=None,
                      limit=1000, max_catchup=1000)  # fmt: skip
    assert plan.run == [datetime(y, 2, 29, tzinfo=UTC) for y in range(2004, 2025, 4)]
    assert plan.next_run_at == datetime(2028, 2, 29, tzinfo=UTC)


def test_the_longest_interval_caught_up_from_1970_does_not_overflow() -> None:
    decade = Timing(every=timedelta(days=3660), anchor=datetime(1970, 1, 1, tzinfo=UTC))
    plan = plan_slots(decade, "all", datetime(1970, 1, 1, tzinfo=UTC), NOW, grace=None, max_lateness=None,
                      limit=1000, max_catchup=2)  # fmt: skip
    assert len(plan.run) == 2 and plan.missed == 4 and plan.next_run_at is not None


def test_max_catchup_counts_slots_not_intervals_at_now() -> None:
    # dense in September and October, absent now: the newest 500 slots, those of 31 October
    autumn = Timing(cron="* * * 9-10 *")
    plan = plan_slots(autumn, "all", datetime(1990, 9, 1, tzinfo=UTC), NOW, grace=None, max_lateness=None,
                      limit=1000, max_catchup=500)  # fmt: skip
    assert len(plan.run) == 500
    assert plan.run[-1] == datetime(2026, 10, 31, 23, 59, tzinfo=UTC)
    assert plan.run[0] == plan.run[-1] - timedelta(minutes=499)
    assert plan.missed == 10_000  # counted up to the counting limit (cron)


def test_a_long_grace_creates_at_most_max_catchup_slots() -> None:
    sec = Timing(every=timedelta(seconds=1))
    total = 0
    nxt = datetime(2020, 1, 1, tzinfo=UTC)
    for _ in range(5):  # ticks at the same instant until nothing more is due
        plan = plan_slots(sec, "skip", nxt, NOW, grace=timedelta(days=3660), max_lateness=None,
                          limit=100, max_catchup=250)  # fmt: skip
        total += len(plan.run)
        assert plan.next_run_at is not None
        nxt = plan.next_run_at
    assert total == 250 and nxt == NOW + timedelta(seconds=1)


def test_a_cron_firing_only_in_daylight_saving_gaps_is_evaluated_at_once() -> None:
    from fleet.timing.schedule import TimingError, next_slot

    gap = Timing(cron="30 2 * 3 0#2", timezone="America/New_York", dst_missing="skip")
    start = time.process_time()
    # its slots up to 2006 (before the rules changed) are planned; then there is no next slot
    plan = plan_slots(gap, "all", datetime(2004, 1, 1, tzinfo=UTC), NOW, grace=None, max_lateness=None,
                      limit=10, max_catchup=10)  # fmt: skip
    assert [s.year for s in plan.run] == [2004, 2005, 2006] and plan.next_run_at is None
    plan = plan_slots(gap, "latest", NOW, NOW + timedelta(days=400), grace=None, max_lateness=None, limit=10)
    assert plan.run == [] and plan.next_run_at is None
    with pytest.raises(TimingError, match="^cron: .*daylight-saving gaps of America/New_York$"):
        next_slot(gap, NOW)
    # bounded by IDLE_CANDIDATES matching wall times (about 0.15 s of CPU on a quick machine); a walk
    # that looked for a slot outside the gaps would not end, so the budget leaves a wide margin
    assert time.process_time() - start < 2.0 * slowness()


# -- runs created ahead that nobody started in time ----------------------------------------------


def stale(*minutes: int, grace: timedelta = timedelta(seconds=30)) -> list[StaleRun]:
    return [StaleRun(at(m), at(m) + grace) for m in minutes]


def test_slots_created_ahead_of_the_outage_example_are_settled_like_slots_created_late() -> None:
    # The outage example with every missed slot created ahead: settled as plan_slots plans them.
    runs = stale(15, 30, 45)
    policies: tuple[CatchUp, ...] = ("skip", "latest", "all")
    for policy in policies:
        why = settle_stale(policy, runs, 0, at(52), max_lateness=None, max_catchup=1000)
        kept = [r.slot for r, w in zip(runs, why, strict=True) if w is None]
        planned = plan_slots(
            Q, policy, at(15), at(52), grace=timedelta(seconds=30), max_lateness=None, limit=100
        )
        assert kept == planned.run, policy


def test_each_skipped_stale_run_says_which_policy_and_grace_dropped_it() -> None:
    runs = stale(15, 30, 45)
    assert (
        settle_stale("skip", runs, 0, at(52), max_lateness=None, max_catchup=1000)
        == ["catchup skip: not started within its grace (30s)"] * 3
    )
    latest = settle_stale("latest", runs, 0, at(52), max_lateness=None, max_catchup=1000)
    assert latest == ["catchup latest: not started within its grace (30s); a newer slot runs instead"] * 2 + [
        None
    ]


def test_latest_runs_none_of_them_when_a_newer_slot_of_the_schedule_is_there() -> None:
    runs = stale(15, 30)
    assert settle_stale("latest", runs, 1, at(52), max_lateness=None, max_catchup=1000)[-1] is not None
    assert settle_stale("latest", runs, 0, at(52), max_lateness=None, max_catchup=1000)[-1] is None


def test_all_runs_the_newest_max_catchup_less_the_newer_runs() -> None:
    runs = stale(0, 15, 30, 45)
    why = settle_stale("all", runs, 0, at(52), max_lateness=None, max_catchup=3)
    assert why[1:] == [None, None, None]
    assert (
        why[0] == "catchup all: not started within its grace (30s); older than the newest 3 slots caught up"
    )
    assert settle_stale("all", runs, 2, at(52), max_lateness=None, max_catchup=3) == [why[0]] * 3 + [None]
    assert all(w is not None for w in settle_stale("all", runs, 5, at(52), max_lateness=None, max_catchup=3))


def test_a_stale_run_kept_but_older_than_max_lateness_is_skipped() -> None:
    runs = stale(15, 45)
    why = settle_stale("all", runs, 0, at(52), max_lateness=timedelta(minutes=20), max_catchup=1000)
    assert why == ["max_lateness: 0:37:00 late (limit 0:20:00)", None]
