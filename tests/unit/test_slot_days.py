"""Unit tests for fleet.timing.schedule.slot_offsets, the day-at-a-time enumeration that `verify` uses:
over any window, in any zone, for any expression it gives exactly the slots of the plain walk
(slots_between), offset changes and the far ends of the calendar included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.timing.schedule import Timing, slot_offsets, slots_between

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


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    expr=st.sampled_from(EXPRESSIONS),
    tz=st.sampled_from(ZONES),
    repeated=st.sampled_from(("first", "last")),
    missing=st.sampled_from(("shift", "skip")),
    start=st.datetimes(
        min_value=datetime(1960, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
    window=st.sampled_from(WINDOWS),
    extra=st.integers(min_value=0, max_value=86_400_000_000),
)
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
