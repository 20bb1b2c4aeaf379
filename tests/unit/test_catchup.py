"""The catch-up plan: skip / latest / all, grace, max lateness, the per-tick bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.catchup import plan_slots
from fleet.schedfile import CatchUp
from fleet.schedule import Timing

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
    # others counted missed (up to the counting limit), not created
    every1s = Timing(every=timedelta(seconds=1))
    now = T + timedelta(seconds=0.2)
    plan = plan_slots(every1s, "all", T - timedelta(days=365), now, grace=None, max_lateness=None,
                      limit=1000, max_catchup=100)  # fmt: skip
    assert 99 <= len(plan.run) <= 101 and plan.run[-1] == T
    assert plan.missed == 10_000  # counted up to the limit
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
