"""A schedule's calendar: `exclude` and `until` as the schedules file writes them (and refuses them),
read on the schedule's wall clock, and planned by the ticker's `plan_slots` across daylight saving."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from fleet.timing.calendars import Calendar, day_start, first_open_slot, from_row
from fleet.timing.catchup import plan_slots
from fleet.timing.schedfile import parse_entry
from fleet.timing.schedule import Timing, TimingError, slots_between

BERLIN = ZoneInfo("Europe/Berlin")
HOUR = timedelta(hours=1)


def entry(**fields: Any) -> tuple[Any, list[str]]:
    return parse_entry({"name": "s", "job": "j", "cron": "0 * * * *", **fields}, "schedule 's'")


def local(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN)


def test_the_file_form_of_a_calendar_is_read_in_the_schedules_time_zone() -> None:
    spec, errs = entry(
        timezone="Europe/Berlin",
        exclude=["2026-12-25", "2026-12-24..2026-12-26", date(2027, 1, 1)],
        until="2027-06-30",
    )
    assert errs == []
    cal = spec.calendar
    assert cal is not None and cal.timezone == "Europe/Berlin"
    # overlapping and adjacent ranges are merged; the stored form keeps what was written
    assert cal.ranges == ((date(2026, 12, 24), date(2026, 12, 26)), (date(2027, 1, 1), date(2027, 1, 1)))
    assert cal.to_json() == {
        "exclude": ["2026-12-25", "2026-12-24..2026-12-26", "2027-01-01"],
        "until": "2027-06-30",
    }
    # a local date, not a UTC one: 23:30 UTC on the 23rd is already the 24th in Berlin
    assert cal.excluded(datetime(2026, 12, 23, 23, 30, tzinfo=UTC)) == (
        date(2026, 12, 24),
        date(2026, 12, 26),
    )
    assert cal.excluded(datetime(2026, 12, 23, 22, 30, tzinfo=UTC)) is None
    assert cal.excluded(local(2026, 12, 27, 0, 0)) is None
    assert not cal.ended(local(2027, 6, 30, 23, 59)) and cal.ended(local(2027, 7, 1, 0, 0))
    assert cal.end() == local(2027, 7, 1).astimezone(UTC)
    assert from_row(cal.to_json(), "Europe/Berlin") == cal
    assert from_row(None, "UTC") is None


def test_until_as_a_date_time_is_an_instant_read_in_the_zone_without_an_offset() -> None:
    spec, errs = entry(timezone="Europe/Berlin", until="2027-06-30T12:00:00")
    assert errs == []
    assert spec.calendar.until == local(2027, 6, 30, 12)
    assert not spec.calendar.ended(local(2027, 6, 30, 12)) and spec.calendar.ended(local(2027, 6, 30, 13))
    spec, errs = entry(until="2027-06-30T12:00:00Z")
    assert errs == [] and spec.calendar.until == datetime(2027, 6, 30, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"exclude": "2026-12-25"}, "schedule 's': exclude: must be a list of dates"),
        ({"exclude": ["2026-13-01"]}, "schedule 's': exclude[0]: not a date: '2026-13-01'"),
        (
            {"exclude": ["2026-12-26..2026-12-24"]},
            "schedule 's': exclude[0]: the range ends before it starts",
        ),
        ({"exclude": ["1969-12-31"]}, "schedule 's': exclude[0]: a date from 1970 to 2999, got 1969-12-31"),
        ({"exclude": ["christmas"]}, "schedule 's': exclude[0]: expected a date such as '2026-12-25'"),
        (
            {"exclude": [datetime(2026, 12, 25, 1)]},
            "schedule 's': exclude[0]: a date such as '2026-12-25', not",
        ),
        ({"exclude": ["2026-01-01"] * 1001}, "schedule 's': exclude: at most 1000 dates or ranges, got 1001"),
        ({"until": "soon"}, "schedule 's': until: not an ISO-8601 date or date-time: 'soon'"),
        ({"until": "3001-01-01"}, "schedule 's': until: a date from 1970 to 2999, got 3001-01-01"),
        ({"until": 5}, "schedule 's': until: must be a date such as '2027-06-30'"),
        (
            {"until": "2026-01-01", "start_at": "2026-02-01T00:00:00Z"},
            "schedule 's': until: 2026-01-01 is before start_at",
        ),
    ],
)
def test_a_bad_calendar_is_refused_in_one_line_naming_the_field(fields: dict[str, Any], line: str) -> None:
    spec, errs = entry(**fields)
    assert spec is None and len(errs) == 1 and errs[0].startswith(line), errs


def test_a_calendar_changes_the_timing_hash_and_none_keeps_the_old_one() -> None:
    plain, _ = entry()
    same, _ = entry()
    excluded, _ = entry(exclude=["2026-12-25"])
    ended, _ = entry(until="2027-01-01")
    assert plain.timing_hash() == same.timing_hash()
    assert len({plain.timing_hash(), excluded.timing_hash(), ended.timing_hash()}) == 3


def test_planning_records_excluded_slots_skipped_across_a_dst_change() -> None:
    # Hourly in Berlin; 29 March 2026 (the clocks spring forward at 02:00 to 03:00) is excluded: its
    # 23 local hours are recorded skipped with the calendar's reason, the days around it run.
    timing = Timing(cron="0 * * * *", timezone="Europe/Berlin")
    cal = Calendar(((date(2026, 3, 29), date(2026, 3, 29)),), None, "Europe/Berlin")
    start, now = local(2026, 3, 28, 22), local(2026, 3, 30, 2)
    run: list[datetime] = []
    skipped: list[tuple[datetime, str]] = []
    nxt: datetime | None = start
    tick = start
    while tick <= now:  # a ticker every hour, on time
        assert nxt is not None
        plan = plan_slots(timing, "latest", nxt, tick, grace=None, max_lateness=None, limit=100, calendar=cal)
        run += plan.run
        skipped += plan.skipped
        nxt = plan.next_run_at
        tick += HOUR
    day = [
        s for s in slots_between(timing, start, now, 100) if s.astimezone(BERLIN).date() == date(2026, 3, 29)
    ]
    assert len(day) == 23
    assert [s for s, _ in skipped] == day
    assert {why for _, why in skipped} == {"calendar: excluded 2026-03-29 (Europe/Berlin)"}
    assert [s.astimezone(BERLIN).hour for s in run] == [22, 23, 0, 1, 2]
    assert not (set(run) & set(day))


def test_excluded_slots_ahead_are_recorded_skipped_ahead_like_the_others_are_created() -> None:
    timing = Timing(every=HOUR)
    t0 = datetime(2026, 12, 24, 21, tzinfo=UTC)
    cal = Calendar(((date(2026, 12, 25), date(2026, 12, 25)),))
    plan = plan_slots(
        timing,
        "latest",
        t0,
        t0,
        grace=None,
        max_lateness=None,
        limit=100,
        lookahead=timedelta(hours=5),
        calendar=cal,
    )
    assert plan.run == [t0, t0 + HOUR, t0 + 2 * HOUR]
    midnight = datetime(2026, 12, 25, tzinfo=UTC)
    assert plan.skipped == [(midnight + n * HOUR, "calendar: excluded 2026-12-25 (UTC)") for n in range(3)]
    assert plan.next_run_at == midnight + 3 * HOUR and not plan.ended
    # a lookahead holding only excluded slots still moves past them (the ticker is never kept busy)
    only = plan_slots(
        timing,
        "latest",
        midnight + HOUR,
        midnight + 30 * timedelta(minutes=1),
        grace=None,
        max_lateness=None,
        limit=100,
        lookahead=timedelta(hours=2),
        calendar=cal,
    )
    assert only.run == [] and [s for s, _ in only.skipped] == [midnight + HOUR, midnight + 2 * HOUR]
    assert only.next_run_at == midnight + 3 * HOUR


def test_until_ends_the_plan_without_creating_or_counting_later_slots() -> None:
    timing = Timing(every=HOUR)
    cal = Calendar((), date(2026, 12, 24))
    t0 = datetime(2026, 12, 24, 22, tzinfo=UTC)
    # ahead: the last slot of the day is created, then the schedule has ended
    plan = plan_slots(
        timing,
        "all",
        t0,
        t0,
        grace=None,
        max_lateness=None,
        limit=100,
        lookahead=timedelta(hours=5),
        calendar=cal,
    )
    assert plan.run == [t0, t0 + HOUR] and plan.ended and plan.next_run_at is None
    # a ticker back after the end: the slots up to it go through catch-up, none after it is created
    late = plan_slots(
        timing, "all", t0, t0 + 10 * HOUR, grace=None, max_lateness=None, limit=100, calendar=cal
    )
    assert late.run == [t0, t0 + HOUR] and late.ended and late.next_run_at is None


def test_first_open_slot_steps_over_exclusions_and_stops_at_until() -> None:
    daily = Timing(cron="0 9 * * *", timezone="Europe/Berlin")
    at = local(2026, 12, 1)
    far = at + timedelta(days=3653)
    cal = Calendar(((date(2026, 12, 1), date(2027, 1, 31)),), None, "Europe/Berlin")
    assert first_open_slot(daily, cal, at, far) == local(2027, 2, 1, 9)
    assert first_open_slot(daily, None, at, far) == local(2026, 12, 1, 9)
    ten_years = Calendar(((date(2026, 1, 1), date(2036, 12, 31)),), None, "Europe/Berlin")
    assert first_open_slot(daily, ten_years, at, far) is None
    assert first_open_slot(daily, Calendar((), date(2026, 11, 30), "Europe/Berlin"), at, far) is None
    # many ranges are stepped over one range at a time, not one slot at a time
    weekdays_off = Calendar(
        tuple((d, d) for d in (date(2026, 12, 1) + timedelta(days=i) for i in range(1000))),
        None,
        "Europe/Berlin",
    )
    assert first_open_slot(daily, weekdays_off, at, far) == local(2029, 8, 27, 9)


def test_quiet_from_is_the_end_of_the_latest_exclusion() -> None:
    cal = Calendar(((date(2026, 12, 24), date(2026, 12, 26)),), None, "Europe/Berlin")
    inside = local(2026, 12, 25, 12)
    assert cal.quiet_from(inside) == inside
    assert cal.quiet_from(local(2026, 12, 28, 12)) == day_start(date(2026, 12, 27), BERLIN)
    assert cal.quiet_from(local(2026, 12, 1)) is None


def test_a_stored_calendar_that_cannot_be_read_names_its_field() -> None:
    with pytest.raises(TimingError, match=r"^exclude\[0\]: not a date"):
        from_row({"exclude": ["2026-02-30"]}, "UTC")
