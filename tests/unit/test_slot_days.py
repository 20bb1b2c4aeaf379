"""Unit tests for fleet.timing.schedule.slot_offsets, the day-at-a-time enumeration that `verify` and
a catch-up's counts use: over any window, in any zone, for any expression it gives exactly the slots
of the plain walk (slots_between), offset changes and the far ends of the calendar included."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.timing.schedule import (
    DROPPED_COUNT_LIMIT,
    Timing,
    _plan,
    count_slots,
    newest_slots_from,
    slot_offsets,
    slots_between,
)

ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "Australia/Lord_Howe",  # half-hour changes
    "Asia/Kathmandu",  # an offset of 5:45
    "Pacific/Apia",  # skipped a whole day in 2011
    "Africa/Casablanca",  # changes twice a year around Ramadan
    "America/St_Johns",
    "Antarctica/Troll",  # a two-hour change
    "Europe/Moscow",
)
EXPRESSIONS = (
    "* * * * *",
    "30 2 * * *",
    "0 * * * *",
    "*/7 1-3 * * *",
    "0 0 * * *",
    "59 23 * * *",
    "0 0,23 * * 1-5",
    "15 */2 L * *",
    "0 3 * * 1#2",
    "*/20 * * * * *",
    "0 30 0 * * *",
    "45 0 * 3,10,11 0",
    "0 0 29 2 *",
    "0 12 LW * *",
)
WINDOWS = (timedelta(0), timedelta(hours=5), timedelta(days=1), timedelta(days=3), timedelta(days=9))
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)


def expanded(t: Timing, start: datetime, end: datetime) -> list[datetime]:
    return [
        base + timedelta(microseconds=o) for base, offsets in slot_offsets(t, start, end) for o in offsets
    ]


def walk_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# A cron timing in any zone, and a range starting between 1960 and 2040, one of the windows long
# plus up to a day.
RANGES = {
    "expr": st.sampled_from(EXPRESSIONS),
    "tz": st.sampled_from(ZONES),
    "repeated": st.sampled_from(("first", "last")),
    "missing": st.sampled_from(("shift", "skip")),
    "start": st.datetimes(
        min_value=datetime(1960, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
    "window": st.sampled_from(WINDOWS),
    "extra": st.integers(min_value=0, max_value=86_400_000_000),
}


@walk_settings(300)
@given(**RANGES)
def test_the_same_slots_as_the_walk(
    expr: str, tz: str, repeated: str, missing: str, start: datetime, window: timedelta, extra: int
) -> None:
    t = Timing(cron=expr, timezone=tz, dst_repeated=repeated, dst_missing=missing)  # type: ignore[arg-type]
    end = start + window + timedelta(microseconds=extra)
    assert expanded(t, start, end) == slots_between(t, start, end, 10**7)


def test_a_year_around_every_transition_of_a_zone() -> None:
    for tz in ("Europe/Berlin", "Australia/Lord_Howe", "Pacific/Apia", "Africa/Casablanca"):
        # (a cadence expression's plain walk costs tens of microseconds a slot: one of them)
        for expr in (
            "0 */6 * * *",
            "30 2 * * *",
            "0 0 * * *",
            *(("20 * * * *",) if tz == "Pacific/Apia" else ()),
        ):
            for repeated in ("first", "last"):
                t = Timing(cron=expr, timezone=tz, dst_repeated=repeated)
                start = datetime(2011, 1, 1, 0, 0, 1, tzinfo=UTC)
                end = start + timedelta(days=366)
                assert expanded(t, start, end) == slots_between(t, start, end, 10**7)


def test_the_far_ends_of_the_calendar() -> None:
    for tz in ("UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/Adak"):
        for expr in ("* * * * *", "0 0 * * *", "59 23 31 12 *", "0 0 1 1 *"):
            t = Timing(cron=expr, timezone=tz)
            for start, end in (
                (LATEST - timedelta(days=2), LATEST),
                (EARLIEST, EARLIEST + timedelta(days=2)),
            ):
                assert expanded(t, start, end) == slots_between(t, start, end, 10**7)


def test_intervals_and_empty_windows() -> None:
    t = Timing(every=timedelta(minutes=7))
    start = datetime(2026, 1, 1, 0, 3, tzinfo=UTC)
    assert expanded(t, start, start + timedelta(hours=5)) == slots_between(
        t, start, start + timedelta(hours=5), 10**4
    )
    assert expanded(Timing(cron="* * * * *"), start, start - timedelta(seconds=1)) == []


def newest_by_walk(t: Timing, start: datetime, end: datetime, count: int) -> tuple[datetime, int]:
    """newest_slots_from by the plain walk: every slot of the range listed."""
    slots = slots_between(t, start, end, 10**7)
    if len(slots) <= count:
        return start, 0
    return slots[-count], min(len(slots) - count, DROPPED_COUNT_LIMIT)


@walk_settings(200)
@given(**RANGES, count=st.integers(min_value=1, max_value=3000))
def test_the_newest_slots_and_the_count_are_the_walks(
    expr: str,
    tz: str,
    repeated: str,
    missing: str,
    start: datetime,
    window: timedelta,
    extra: int,
    count: int,
) -> None:
    """Where a catch-up's newest `count` slots begin, and how many come before (counted up to the
    limit), are those of the plain walk, a stretch of days back from the end at a time."""
    t = Timing(cron=expr, timezone=tz, dst_repeated=repeated, dst_missing=missing)  # type: ignore[arg-type]
    end = start + window + timedelta(microseconds=extra)
    assert newest_slots_from(t, start, end, count) == newest_by_walk(t, start, end, count)
    slots = slots_between(t, start, end, 10**7)
    assert count_slots(t, start, end, count) == min(len(slots), count)


def test_a_long_catch_up_is_counted_by_the_day() -> None:
    """A range of decades: the newest slots found back from its end, the ones before counted up to
    the limit from its start, both as the walk finds them at each end."""
    for t, start in (
        (Timing(cron="* * * 9-10 *"), datetime(1990, 1, 1, tzinfo=UTC)),
        (Timing(cron="* * * * * *", timezone="Pacific/Chatham"), datetime(1970, 1, 2, tzinfo=UTC)),
        (Timing(cron="0 0 29 2 *", timezone="Pacific/Apia"), datetime(1970, 1, 2, tzinfo=UTC)),
    ):
        end = datetime(2026, 12, 5, 12, 0, 0, 1, tzinfo=UTC)
        for count in (1, 3, 100_000):
            walked = [s for s in _descending(t, end, count + 1) if s >= start]
            if len(walked) <= count:
                assert newest_slots_from(t, start, end, count) == (start, 0)
                continue
            before = slots_between(
                t, start, walked[count - 1] - timedelta(microseconds=1), DROPPED_COUNT_LIMIT
            )
            assert newest_slots_from(t, start, end, count) == (walked[count - 1], len(before))


def _descending(t: Timing, end: datetime, count: int) -> Iterator[datetime]:
    """The plain walk back from `end`, `count` slots at most."""
    yield from itertools.islice(_plan(t).before(end), count)
