"""Unit tests for fleet.timing.schedule's cheaper walks: one walk of the wall clock for cadence
expressions while wall times occur once, slots with the next one in one walk, and cadence runs of
equal gaps. Each is checked against the plain evaluation around daylight saving transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from fleet.timing.schedule import (
    Timing,
    _plan,
    cadence_run,
    cadence_slots,
    nominal_interval,
    slots_and_next,
    slots_between,
)
from fleet.timing.schedule import next_slot as next_after

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "America/Santiago", "Australia/Lord_Howe")
EXPRESSIONS = ("0 * * * *", "30 * * * *", "*/20 * * * *", "15 30 * * * *", "0 */2 * * *", "0 9 * * 1-5")
# Around Berlin's and New York's autumn and spring transitions, Lord Howe's half-hour ones and a
# quiet day.
STARTS = (
    datetime(2026, 10, 24, 22, 47, 13, tzinfo=UTC),
    datetime(2026, 10, 25, 0, 59, 59, tzinfo=UTC),
    datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
    datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
    datetime(2026, 3, 8, 6, 45, tzinfo=UTC),
    datetime(2026, 4, 4, 14, 50, tzinfo=UTC),
    datetime(2026, 10, 3, 15, 10, tzinfo=UTC),
    datetime(2026, 6, 15, 12, 0, tzinfo=UTC),
)


def cron(expr: str, tz: str) -> Timing:
    return Timing(cron=expr, timezone=tz)


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_one_walk_finds_what_two_merged_walks_find(expr: str, tz: str) -> None:
    plan = _plan(cron(expr, tz))
    for start in STARTS:
        for at in (start + k * timedelta(minutes=17) for k in range(12)):
            assert list(islice(plan.after(at), 40)) == list(islice(plan._merged(at), 40)), at  # type: ignore[union-attr]
            both = [s for rule in plan.rules if (s := plan._latest(at, *rule)) is not None]  # type: ignore[union-attr]
            assert plan.latest(at) == max(both, default=None), at


@pytest.mark.parametrize("tz", ZONES)
def test_slots_and_next_is_slots_between_then_next_slot(tz: str) -> None:
    for expr in EXPRESSIONS:
        t = cron(expr, tz)
        for start in STARTS:
            for span, limit in ((timedelta(seconds=60), 10), (timedelta(hours=5), 3), (timedelta(0), 1)):
                slots, following = slots_and_next(t, start, start + span, limit)
                assert slots == slots_between(t, start, start + span, limit)
                assert following == (next_after(t, slots[-1]) if slots else None)
    assert slots_and_next(cron("0 * * * *", tz), STARTS[0], STARTS[0], 0) == ([], None)


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_a_cadence_run_reports_the_real_gap_throughout(expr: str, tz: str) -> None:
    t = cron(expr, tz)
    for at in STARTS:
        run = cadence_run(t, at, 24)
        assert run is not None
        a, gap, m, c = run
        assert a <= at < m < c
        assert cadence_run(t, at, 0) == (a, cadence_slots(t, at)[1] - a, *cadence_slots(t, at)[1:])  # type: ignore[index]
        slots = slots_between(t, a, c, 100)
        assert slots[0] == a and slots[-1] == c and m in slots
        assert len(slots) <= 27
        for x, y in zip(slots, slots[1:], strict=False):
            # every instant of [a, m) has the gap of the run, every instant of [m, c) c - m
            expected = gap if y <= m else c - m
            assert y - x == expected
            for probe in (x, x + (y - x) / 2, y - timedelta(microseconds=1)):
                assert nominal_interval(t, probe) == expected


def test_a_run_stops_at_a_change_of_gap() -> None:
    # a daily 09:00 in Berlin: 24 h a day, 23 h over the spring transition of 29 March 2026
    t = cron("0 9 * * *", "Europe/Berlin")
    run = cadence_run(t, datetime(2026, 3, 20, 12, tzinfo=UTC), 24)
    assert run is not None
    a, gap, m, c = run
    assert gap == timedelta(hours=24)
    assert m == datetime(2026, 3, 28, 8, tzinfo=UTC) and c - m == timedelta(hours=23)
    # an hourly cron in a zone without transitions: one gap for its whole 24 slots
    a, gap, m, c = cadence_run(cron("15 30 * * * *", "UTC"), STARTS[-1], 24)  # type: ignore[misc]
    assert gap == c - m == timedelta(hours=1) and m - a == timedelta(hours=25)
