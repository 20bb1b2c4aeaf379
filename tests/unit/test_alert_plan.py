"""What the alert process tells, and whom (fleet.alert.evaluate.plan): routing by schedule pattern and
verdict, one notice per problem (deduplicated), repeats after the interval, recoveries (or not),
the fleet's own verdicts told once per route, and what they make of each schedule (LATE, OVERDUE)
held back as theirs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.admin.alert_routes import AlertRoute
from fleet.alert.evaluate import FLEET, OpenProblem, Plan, conditions, plan, settle_s, span
from fleet.health.results import ScheduleHealth
from fleet.health.verdicts import FleetHealth, TickerSeen

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
TICKING = FleetHealth(live_tickers=1)


def health(name: str, *problems: str, **kw: Any) -> ScheduleHealth:
    fields: dict[str, Any] = dict(
        name=name,
        verdict=problems[0] if problems else "OK",
        healthy=not problems,
        problems=tuple(problems),
        since_last_success_s=None,
        quiet_s=7500.0,
        dead_runs=1 if "DEAD" in problems else 0,
        oldest_pending_age_s=None,
        next_run_at=None,
        last_outcome=None,
        last_run_at=None,
        last_success_at=None,
        last_error="boom" if "DEAD" in problems else None,
        interval_s=3600.0,
        pending_runs=0,
        waiting_runs=0,
        running_runs=0,
        unserved_runs=0,
        job="reports.build",
        job_served=True,
        paused=False,
        pause_note=None,
        paused_at=None,
        enabled=True,
    )
    fields.update(kw)
    return ScheduleHealth(**fields)


def route(name: str = "r", **kw: Any) -> AlertRoute:
    return AlertRoute(name=name, kind="webhook", target={"url_env": "U"}, **kw)


def told(p: Plan) -> list[tuple[str, str, str, str]]:
    return [(n.route, n.subject, n.verdict, n.event) for n in p.notices]


def told_keys(p: Plan) -> list[tuple[str, str, str]]:
    return [(n.route, n.subject, n.verdict) for n in p.notices]


def opened(p: Plan, at: datetime = T0) -> list[OpenProblem]:
    """The open problems after `p` (none were open before)."""
    return [OpenProblem(r, s, v, at, at) for r, s, v in p.opened]


def test_a_problem_is_told_once_to_each_route_that_covers_it() -> None:
    routes = [
        route("all"),
        route("reports", schedules=("reports.*",)),
        route("billing", schedules=("billing-*",)),
        route("dead-only", verdicts=("DEAD",)),
    ]
    subjects = conditions(TICKING, [health("reports.daily", "LATE"), health("billing-eu")])
    first = plan(routes, subjects, [], T0)
    assert told(first) == [
        ("all", "reports.daily", "LATE", "alert"),
        ("reports", "reports.daily", "LATE", "alert"),
    ]
    # read again, unchanged: nothing new (deduplicated by the open problem)
    again = plan(routes, subjects, opened(first), T0 + timedelta(minutes=5))
    assert told(again) == [] and again.closed == [] and again.dropped == []


def test_each_verdict_of_a_schedule_is_a_problem_of_its_own() -> None:
    subjects = conditions(TICKING, [health("s", "DEAD", "LATE")])
    first = plan([route()], subjects, [], T0)
    assert told(first) == [("r", "s", "DEAD", "alert"), ("r", "s", "LATE", "alert")]
    # LATE ends while DEAD stays: one recovery, for LATE
    later = plan(
        [route()], conditions(TICKING, [health("s", "DEAD")]), opened(first), T0 + timedelta(minutes=1)
    )
    assert told(later) == [("r", "s", "LATE", "recovery")]
    assert later.notices[0].payload["verdict_now"] == "DEAD"
    assert later.notices[0].payload["summary"] == "RESOLVED LATE: s: ended; now DEAD (after 1m00s)"


def test_repeat_after_the_interval_and_not_before() -> None:
    r = route(repeat=timedelta(hours=1))
    subjects = conditions(TICKING, [health("s", "LATE")])
    first = plan([r], subjects, [], T0)
    state = opened(first)
    assert told(plan([r], subjects, state, T0 + timedelta(minutes=59))) == []
    again = plan([r], subjects, state, T0 + timedelta(hours=1))
    assert told(again) == [("r", "s", "LATE", "repeat")] and again.repeated == [("r", "s", "LATE")]
    assert again.notices[0].payload["notice"] == 2
    assert again.notices[0].payload["summary"].endswith("(still, for 1h00m)")
    # without a repeat interval, never again
    assert told(plan([route()], subjects, state, T0 + timedelta(days=3))) == []


def test_recovery_is_told_unless_the_route_says_not() -> None:
    state = [OpenProblem("r", "s", "LATE", T0, T0)]
    ok = conditions(TICKING, [health("s")])
    assert told(plan([route()], ok, state, T0)) == [("r", "s", "LATE", "recovery")]
    quiet = plan([route(recovery=False)], ok, state, T0)
    assert told(quiet) == [] and quiet.closed == [("r", "s", "LATE")]


def test_a_route_that_no_longer_covers_a_problem_drops_it_without_a_word() -> None:
    state = [OpenProblem("r", "s", "LATE", T0, T0), OpenProblem("r", "t", "DEAD", T0, T0)]
    subjects = conditions(TICKING, [health("s", "LATE"), health("t", "DEAD")])
    p = plan([route(schedules=("s",), verdicts=("DEAD",))], subjects, state, T0)
    assert told(p) == [] and sorted(p.dropped) == [("r", "s", "LATE"), ("r", "t", "DEAD")]


def test_a_schedule_that_is_gone_ends_its_problems() -> None:
    p = plan([route()], conditions(TICKING, []), [OpenProblem("r", "s", "LATE", T0, T0)], T0)
    assert told(p) == [("r", "s", "LATE", "recovery")]
    assert p.notices[0].payload["summary"].startswith("RESOLVED LATE: s: ended: the schedule is gone")


def test_no_ticker_is_told_once_per_route_as_the_fleets() -> None:
    fleet = FleetHealth(live_tickers=0, last_ticker=TickerSeen("h:ticker_00", "h", T0, 95.0))
    healths = [health(f"s{i}", "NO-TICKER", "LATE") for i in range(50)] + [health("x", "NO-TICKER")]
    subjects = conditions(fleet, healths)
    routes = [
        route("a", verdicts=("NO-TICKER",)),
        route("x", schedules=("x",)),
        route("none", schedules=("zz*",)),
    ]
    p = plan(routes, subjects, [], T0)
    assert told(p) == [("a", FLEET, "NO-TICKER", "alert"), ("x", FLEET, "NO-TICKER", "alert")]
    payload = p.notices[0].payload
    assert payload["schedule"] is None and len(payload["schedules"]) == 51
    assert (
        payload["summary"]
        == "NO-TICKER: fleet: no ticker seen for 1m35s (last: h:ticker_00 on h): no slot is created"
    )
    assert p.notices[1].payload["schedules"] == ["x"]
    # a ticker is back: each route hears of it once
    back = plan(routes, conditions(TICKING, [health("x")]), opened(p), T0 + timedelta(minutes=2))
    assert told(back) == [("a", FLEET, "NO-TICKER", "recovery"), ("x", FLEET, "NO-TICKER", "recovery")]


NO_TICKER = FleetHealth(live_tickers=0, last_ticker=TickerSeen("h:ticker_00", "h", T0, 95.0))


def test_under_no_ticker_late_is_the_fleets_held_untold_and_told_in_its_place() -> None:
    healths = [health(f"s{i}", "NO-TICKER", "LATE") for i in range(50)]
    healths.append(health("d", "DEAD", "NO-TICKER", "OVERDUE", "LATE", deadline_s=60.0))
    routes = [route("all"), route("late", verdicts=("LATE",)), route("dead", verdicts=("DEAD",))]
    p = plan(routes, conditions(NO_TICKER, healths), [], T0)
    assert sorted(told(p)) == [
        ("all", FLEET, "NO-TICKER", "alert"),
        ("all", "d", "DEAD", "alert"),  # not the fleet's doing
        ("dead", "d", "DEAD", "alert"),
        ("late", FLEET, "NO-TICKER", "alert"),  # in place of its 51 LATE
    ]
    assert len(p.held) == 2 * 51 + 1 and ("all", "d", "OVERDUE") in p.held and p.opened == told_keys(p)
    # read again under it: still held (the last read under it noted), nothing told
    state = opened(p) + [OpenProblem(r, s, v, T0, T0, notices=0) for r, s, v in p.held]
    again = plan(routes, conditions(NO_TICKER, healths), state, T0 + timedelta(hours=3))
    assert told(again) == [] and len(again.held) == len(p.held) and again.closed == again.dropped == []
    # no longer LATE, still no ticker: the held ends without a word; the fleet's notice stays open
    quiet = [health(f"s{i}", "NO-TICKER") for i in range(50)] + [health("d", "DEAD", "NO-TICKER")]
    later = plan(routes, conditions(NO_TICKER, quiet), state, T0 + timedelta(hours=4))
    assert told(later) == [] and sorted(later.closed) == sorted(p.held)


def test_a_held_consequence_is_told_once_it_outlasts_the_fleet_verdict_and_ends_quietly() -> None:
    held = [OpenProblem("r", "s", "LATE", T0, T0, notices=0)]  # last read under NO-TICKER: T0
    late = conditions(TICKING, [health("s", "LATE")])  # every hour: two intervals to settle
    settling = plan([route()], late, held, T0 + timedelta(hours=1, minutes=59))
    assert told(settling) == [] and settling.closed == [] and settling.held == []
    own = plan([route()], late, held, T0 + timedelta(hours=2))
    assert told(own) == [("r", "s", "LATE", "alert")] and own.opened == [("r", "s", "LATE")]
    assert own.notices[0].payload["notice"] == 1
    ended = plan([route()], conditions(TICKING, [health("s")]), held, T0 + timedelta(minutes=5))
    assert told(ended) == [] and ended.closed == [("r", "s", "LATE")]
    assert settle_s(health("o", "OVERDUE", interval_s=600.0, deadline_s=300.0), "OVERDUE") == 900.0


def test_a_problem_told_before_the_ticker_left_is_not_repeated_meanwhile() -> None:
    r = route(repeat=timedelta(hours=1), verdicts=("LATE",))
    state = [OpenProblem("r", "s", "LATE", T0, T0)]
    gone = plan(
        [r], conditions(NO_TICKER, [health("s", "NO-TICKER", "LATE")]), state, T0 + timedelta(hours=3)
    )
    assert told(gone) == [("r", FLEET, "NO-TICKER", "alert")] and gone.held == [] and gone.closed == []
    back = plan([r], conditions(TICKING, [health("s", "LATE")]), state, T0 + timedelta(hours=3))
    assert told(back) == [("r", "s", "LATE", "repeat")]


def test_the_lines_say_why() -> None:
    subjects = conditions(
        TICKING,
        [
            health("d", "DEAD"),
            health("w", "NO-WORKER", unserved_runs=3, job="etl.load"),
            health("b", "BROKEN", broken_error="cron: no slot"),
            health(
                "o",
                "OVERDUE",
                deadline_s=900.0,
                overdue_slot=T0,
            ),
        ],
    )
    lines = {n.subject: n.payload["summary"] for n in plan([route()], subjects, [], T0).notices}
    assert lines == {
        "d": "DEAD: d: 1 dead run waits for an operator's retry or discard; last error: boom",
        "w": "NO-WORKER: w: no live worker runs job etl.load (3 open runs wait)",
        "b": "BROKEN: b: its timing cannot be evaluated: cron: no slot",
        "o": "OVERDUE: o: the run of slot 2026-12-01T10:00:00Z was not done by its deadline 2026-12-01T10:15:00Z",
    }


def test_spans_read_like_status() -> None:
    assert [span(s) for s in (None, 0.4, 42, 185, 7800, 3 * 86400 + 4 * 3600)] == [
        "-",
        "0s",
        "42s",
        "3m05s",
        "2h10m",
        "3d04h",
    ]
