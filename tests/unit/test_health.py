"""The health verdict from its numbers, without a database."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest

from fleet.health.verdicts import (
    SEVERITY,
    UNHEALTHY,
    FleetHealth,
    Health,
    Verdict,
    is_healthy,
    problems,
    retrying_text,
    verdict,
)

HOURLY = Health(interval_s=3600.0, quiet_s=600.0, dead_runs=0, oldest_pending_age_s=None, unserved_runs=0)


def test_a_schedule_that_succeeded_recently_is_ok() -> None:
    assert verdict(HOURLY) == "OK" and problems(HOURLY) == [] and is_healthy("OK")


@pytest.mark.parametrize(
    ("quiet_s", "expected"), [(7199.0, "OK"), (7200.0, "OK"), (7200.5, "LATE"), (86400.0, "LATE")]
)
def test_late_after_more_than_two_intervals(quiet_s: float, expected: str) -> None:
    assert verdict(replace(HOURLY, quiet_s=quiet_s)) == expected


def test_late_uses_the_schedule_cadence() -> None:
    # 3 hours without success: late for an hourly job, fine for a daily one
    assert verdict(replace(HOURLY, quiet_s=3 * 3600)) == "LATE"
    assert verdict(replace(HOURLY, interval_s=86400.0, quiet_s=3 * 3600)) == "OK"


def test_dead_runs_are_dead_even_after_a_later_success() -> None:
    assert verdict(replace(HOURLY, dead_runs=1, quiet_s=1.0)) == "DEAD"


@pytest.mark.parametrize(
    ("age", "expected"), [(None, "OK"), (0.0, "OK"), (3600.0, "OK"), (3601.0, "BACKLOG")]
)
def test_backlog_when_a_due_run_waited_longer_than_one_interval(age: float | None, expected: str) -> None:
    assert verdict(replace(HOURLY, oldest_pending_age_s=age)) == expected


def test_unserved_runs_are_no_worker() -> None:
    assert verdict(replace(HOURLY, unserved_runs=3)) == "NO-WORKER"


def test_paused_and_disabled_are_healthy_and_never_late() -> None:
    quiet = replace(HOURLY, quiet_s=10 * 86400)
    assert verdict(replace(quiet, paused=True)) == "PAUSED"
    assert verdict(replace(quiet, enabled=False)) == "DISABLED"
    assert is_healthy("PAUSED") and is_healthy("DISABLED")
    # a paused schedule's dead runs still need an operator
    assert verdict(replace(quiet, paused=True, dead_runs=2)) == "DEAD"


def test_the_verdict_is_the_most_severe_problem_and_all_are_listed() -> None:
    everything = replace(HOURLY, quiet_s=99999.0, dead_runs=1, oldest_pending_age_s=99999.0, unserved_runs=1)
    assert problems(everything) == ["DEAD", "NO-WORKER", "BACKLOG", "LATE"]
    assert verdict(everything) == "DEAD"
    assert verdict(replace(everything, dead_runs=0)) == "NO-WORKER"
    assert verdict(replace(everything, dead_runs=0, unserved_runs=0)) == "BACKLOG"


def test_unknown_cadence_turns_off_late_and_backlog_only() -> None:
    h = replace(HOURLY, interval_s=None, quiet_s=1e9, oldest_pending_age_s=1e9)
    assert verdict(h) == "OK"
    assert verdict(replace(h, dead_runs=1)) == "DEAD"


def test_unhealthy_verdicts() -> None:
    unhealthy = ["BROKEN", "DEAD", "NO-TICKER", "TICKER-CRASHING", "NO-WORKER", "OVERDUE", "BACKLOG", "LATE"]
    assert set(unhealthy) == UNHEALTHY
    assert [v for v in SEVERITY if not is_healthy(v)] == unhealthy
    assert set(SEVERITY) == set(get_args(Verdict))  # every verdict has its place in the order


def test_a_missed_deadline_is_overdue_below_no_worker_above_backlog() -> None:
    assert verdict(replace(HOURLY, overdue=True)) == "OVERDUE" and not is_healthy("OVERDUE")
    everything = replace(HOURLY, quiet_s=99999.0, oldest_pending_age_s=99999.0, unserved_runs=1, overdue=True)
    assert problems(everything) == ["NO-WORKER", "OVERDUE", "BACKLOG", "LATE"]
    assert problems(replace(HOURLY, overdue=False)) == []


def test_a_broken_schedule_is_broken_before_anything_else() -> None:
    everything = replace(HOURLY, quiet_s=99999.0, dead_runs=1, oldest_pending_age_s=99999.0, unserved_runs=1)
    assert verdict(replace(HOURLY, broken=True)) == "BROKEN" and not is_healthy("BROKEN")
    assert problems(replace(everything, broken=True)) == ["BROKEN", "DEAD", "NO-WORKER", "BACKLOG", "LATE"]
    # paused, it stays broken (its timing still needs fixing), like dead runs stay dead
    assert problems(replace(HOURLY, broken=True, paused=True)) == ["BROKEN", "PAUSED"]


def test_the_fleet_verdicts_hold_for_the_schedules_that_expect_slots() -> None:
    fleet = FleetHealth(live_tickers=0, crashed_tickers=1)
    assert fleet.problems == ("NO-TICKER", "TICKER-CRASHING")
    assert FleetHealth(live_tickers=2).problems == ()
    assert problems(replace(HOURLY, fleet=fleet.problems)) == ["NO-TICKER", "TICKER-CRASHING"]
    late = replace(HOURLY, quiet_s=99999.0, dead_runs=1, fleet=("NO-TICKER",))
    assert problems(late) == ["DEAD", "NO-TICKER", "LATE"]
    assert problems(replace(HOURLY, broken=True, fleet=("NO-TICKER",))) == ["BROKEN", "NO-TICKER"]
    # a paused or disabled schedule expects no slot: the fleet's tickers are none of its business
    assert verdict(replace(HOURLY, paused=True, fleet=("NO-TICKER",))) == "PAUSED"
    assert verdict(replace(HOURLY, enabled=False, fleet=fleet.problems)) == "DISABLED"


def test_a_run_waiting_to_retry_is_retrying_healthy_and_below_late() -> None:
    retrying = replace(HOURLY, retrying_runs=1)
    assert verdict(retrying) == "RETRYING" and is_healthy("RETRYING")
    # retries that keep the schedule quiet for long: LATE says so, RETRYING says why
    assert problems(replace(retrying, quiet_s=3 * 3600)) == ["LATE", "RETRYING"]
    assert problems(replace(retrying, dead_runs=1, paused=True)) == ["DEAD", "RETRYING", "PAUSED"]


@pytest.mark.parametrize(
    ("overlap", "tail"),
    [
        ("skip", "; later slots are skipped until it ends (overlap skip)"),
        ("queue", "; later slots wait for it (overlap queue)"),
        ("allow", ""),
    ],
)
def test_the_retrying_note_says_what_the_run_does_to_later_slots(overlap: str, tail: str) -> None:
    text = retrying_text("2026-11-02T10:00:00Z", "2026-11-02T10:00:41.250Z", overlap)
    assert text == "2026-11-02T10:00:00Z waits to retry at 2026-11-02T10:00:41.250Z" + tail
