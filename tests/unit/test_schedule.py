"""Unit tests for fleet.timing.schedule: durations, validation, interval and cron slots, daylight saving."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from fleet.timing.schedule import (
    Timing,
    TimingError,
    describe,
    first_slot_at_or_after,
    latest_slot_at_or_before,
    next_slot,
    nominal_interval,
    parse_duration,
    slots_between,
    validate_timing,
    zone,
)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
SANTIAGO = "America/Santiago"
LORD_HOWE = "Australia/Lord_Howe"

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
MICROSECOND = timedelta(microseconds=1)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def cron(expr: str, tz: str = "UTC", **options: str) -> Timing:
    return Timing(cron=expr, timezone=tz, **options)  # type: ignore[arg-type]


def walls(slots: list[datetime], tz: str) -> list[str]:
    """Local wall time and offset of each slot, e.g. '02:00+01:00'."""
    return [slot.astimezone(ZoneInfo(tz)).strftime("%H:%M%z")[:-2] for slot in slots]


def window(t: Timing, start: datetime, end: datetime) -> list[datetime]:
    return slots_between(t, start, end, 100_000)


# ---------------------------------------------------------------------------------------------------
# parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("1w2d3h4m5s6ms7us", timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5, microseconds=6007)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("  45s ", timedelta(seconds=45)),
        ("0s", timedelta(0)),
        ("90", timedelta(seconds=90)),
    ],
)
def test_parse_duration_units(text: str, expected: timedelta) -> None:
    assert parse_duration(text, "every") == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(5, timedelta(seconds=5)), (2.5, timedelta(seconds=2.5)), (0, timedelta(0)), (0.0, timedelta(0))],
)
def test_parse_duration_numbers_are_seconds(value: int | float, expected: timedelta) -> None:
    assert parse_duration(value, "every") == expected


@pytest.mark.parametrize(
    "value",
    ["", "abc", "5 m", "5M", "1e3s", "1h1h", "30m1h", "1x", "h", "1.h", "5m-", "0.0000001s", "٣s", "1" * 200],
)
def test_parse_duration_refuses_garbage(value: str) -> None:
    with pytest.raises(TimingError) as caught:
        parse_duration(value, "timeout")
    assert str(caught.value).startswith("timeout: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value", ["-5m", " -1s", -1, -0.5])
def test_parse_duration_refuses_negative(value: str | int | float) -> None:
    with pytest.raises(TimingError, match=r"^every: must not be negative"):
        parse_duration(value, "every")


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), 10**30, "99999999999w", None])
def test_parse_duration_refuses_non_durations(value: object) -> None:
    with pytest.raises(TimingError, match=r"^every: "):
        parse_duration(value, "every")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# zone


def test_zone_returns_the_named_zone() -> None:
    assert zone(BERLIN) == ZoneInfo(BERLIN)
    assert zone("UTC") == ZoneInfo("UTC")
    assert zone("Etc/GMT+5") == ZoneInfo("Etc/GMT+5")


def test_zone_unknown_message() -> None:
    with pytest.raises(TimingError) as caught:
        zone("Mars/Olympus_Mons")
    assert str(caught.value) == "timezone: unknown time zone 'Mars/Olympus_Mons'"


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "../../etc/passwd",
        "Europe/../UTC",
        "Europe//Berlin",
        "America",
        "zone.tab",
        "tzdata.zi",
        "localtime",
        "posixrules",
        "Europe/Berlin\x00",
        " UTC",
        "utc",
        "Europe/Berlin/",
        "x" * 500,
    ],
)
def test_zone_refuses_non_zones(name: str) -> None:
    with pytest.raises(TimingError, match=r"^timezone: unknown time zone "):
        zone(name)


# ---------------------------------------------------------------------------------------------------
# validate_timing


def test_never_firing_cron_is_refused() -> None:
    with pytest.raises(TimingError) as caught:
        validate_timing(cron("0 0 30 2 *"))
    assert str(caught.value) == 'cron: never fires ("0 0 30 2 *")'


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", 'cron: minute field: 61 is out of range 0-59 ("61 * * * *")'),
        ("*/0 * * * *", 'cron: minute field: a step must be at least 1, not 0 ("*/0 * * * *")'),
        ("0 24 * * *", 'cron: hour field: 24 is out of range 0-23 ("0 24 * * *")'),
        ("0 0 * * 8", 'cron: day-of-week field: 8 is out of range 0-7 ("0 0 * * 8")'),
        ("0 0 1 13 *", 'cron: month field: 13 is out of range 1-12 ("0 0 1 13 *")'),
        ("0 0 ? * *", 'cron: day-of-month field: ? is not cron; write * ("0 0 ? * *")'),
        ("0 0 31 4,6 *", 'cron: never fires ("0 0 31 4,6 *")'),
        ("0 0 */31 * MON#2", 'cron: never fires ("0 0 */31 * MON#2")'),
        ("* * * *", 'cron: expected 5 fields, or 6 with seconds first, not 4 ("* * * *")'),
        ("0 0 0 1 1 * 2026", 'cron: expected 5 fields, or 6 with seconds first, not 7 ("0 0 0 1 1 * 2026")'),
        ("@reboot", 'cron: unknown nickname ("@reboot")'),
        ("", "cron: empty expression"),
        ("0 0 * * MON\x00", 'cron: unexpected character U+0000 ("0 0 * * MON\\x00")'),
        ("٠ * * * *", 'cron: unexpected character U+0660 ARABIC-INDIC DIGIT ZERO ("\\u0660 * * * *")'),
        ("0 0 * * X", "cron: day-of-week field: 'X' is not a value (\"0 0 * * X\")"),
    ],
)
def test_invalid_cron_is_refused(expr: str, message: str) -> None:
    with pytest.raises(TimingError) as caught:
        validate_timing(cron(expr))
    assert str(caught.value) == message


def test_oversized_cron_is_refused() -> None:
    with pytest.raises(TimingError) as caught:
        validate_timing(cron("0 " * 150))
    assert str(caught.value) == "cron: expression too long (300 characters, at most 200)"


@pytest.mark.parametrize(
    "expr",
    [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@Daily",
        "*/20 * * * * *",
        "0 0 L * *",
        "0 0 LW * *",
        "0 0 * * 5L",
        "0 0 * * MON#2",
        "0 0 29 2 *",
        "0 0 * 2 MON#5",
        "  0  2 * * *  ",
        "0 9-17/2 * JAN-MAR mon-fri",
    ],
)
def test_valid_cron_is_accepted(expr: str) -> None:
    validate_timing(cron(expr, BERLIN))


@pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-1), timedelta(microseconds=-1)])
def test_every_must_be_positive(every: timedelta) -> None:
    with pytest.raises(TimingError) as caught:
        validate_timing(Timing(every=every))
    assert str(caught.value) == "every: must be positive"


def test_exactly_one_of_cron_and_every() -> None:
    with pytest.raises(TimingError, match=r"^cron/every: "):
        validate_timing(Timing())
    with pytest.raises(TimingError, match=r"^cron/every: "):
        validate_timing(Timing(every=MINUTE, cron="* * * * *"))


def test_unknown_timezone_is_refused() -> None:
    with pytest.raises(TimingError) as caught:
        validate_timing(cron("@daily", "Europe/Atlantis"))
    assert str(caught.value) == "timezone: unknown time zone 'Europe/Atlantis'"
    with pytest.raises(TimingError, match=r"^timezone: "):
        validate_timing(Timing(every=MINUTE, timezone="../UTC"))


def test_naive_anchor_is_refused() -> None:
    with pytest.raises(TimingError, match=r"^anchor: "):
        validate_timing(Timing(every=MINUTE, anchor=datetime(2026, 1, 1)))


def test_dst_options_are_checked() -> None:
    with pytest.raises(TimingError, match=r"^dst_repeated: "):
        validate_timing(cron("30 2 * * *", BERLIN, dst_repeated="both"))
    with pytest.raises(TimingError, match=r"^dst_missing: "):
        validate_timing(cron("30 2 * * *", BERLIN, dst_missing="later"))


def test_queries_refuse_invalid_timing_and_naive_datetimes() -> None:
    with pytest.raises(TimingError):
        next_slot(cron("0 0 30 2 *"), utc(2026, 1, 1))
    with pytest.raises(TimingError):
        latest_slot_at_or_before(Timing(every=timedelta(0)), utc(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        next_slot(Timing(every=MINUTE), datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        slots_between(cron("* * * * *"), utc(2026, 1, 1), datetime(2026, 1, 2), 10)


# ---------------------------------------------------------------------------------------------------
# Interval schedules


def test_interval_without_anchor_aligns_to_the_epoch() -> None:
    t = Timing(every=timedelta(minutes=5))
    assert next_slot(t, utc(2026, 5, 4, 10, 3, 12)) == utc(2026, 5, 4, 10, 5)
    assert next_slot(t, utc(2026, 5, 4, 10, 5)) == utc(2026, 5, 4, 10, 10)
    assert first_slot_at_or_after(t, utc(2026, 5, 4, 10, 5)) == utc(2026, 5, 4, 10, 5)
    assert first_slot_at_or_after(t, utc(2026, 5, 4, 10, 5, 0, 1)) == utc(2026, 5, 4, 10, 10)
    assert latest_slot_at_or_before(t, utc(2026, 5, 4, 10, 4, 59, 999999)) == utc(2026, 5, 4, 10, 0)
    assert latest_slot_at_or_before(t, utc(2026, 5, 4, 10, 5)) == utc(2026, 5, 4, 10, 5)


def test_interval_anchor_sets_the_phase() -> None:
    t = Timing(every=timedelta(minutes=5), anchor=utc(2026, 5, 4, 10, 2))
    assert first_slot_at_or_after(t, utc(2026, 5, 4, 10, 0)) == utc(2026, 5, 4, 10, 2)
    assert next_slot(t, utc(2026, 5, 4, 10, 2)) == utc(2026, 5, 4, 10, 7)
    # Slots extend before the anchor too.
    assert latest_slot_at_or_before(t, utc(2026, 5, 4, 10, 1)) == utc(2026, 5, 4, 9, 57)


def test_interval_anchor_in_another_zone_and_in_the_future() -> None:
    berlin_anchor = Timing(every=HOUR, anchor=datetime(2030, 1, 1, 12, 20, tzinfo=ZoneInfo(BERLIN)))
    assert next_slot(berlin_anchor, utc(2026, 5, 4, 10, 0)) == utc(2026, 5, 4, 10, 20)


def test_results_are_utc_whatever_the_input_zone() -> None:
    at = datetime(2026, 7, 1, 12, 3, tzinfo=ZoneInfo(BERLIN))
    for t in (Timing(every=timedelta(minutes=5)), cron("*/5 * * * *", NEW_YORK)):
        for slot in (next_slot(t, at), first_slot_at_or_after(t, at), latest_slot_at_or_before(t, at)):
            assert slot is not None
            assert slot.tzinfo is UTC
        assert next_slot(t, at) == utc(2026, 7, 1, 10, 5)


def test_interval_after_a_long_gap_is_arithmetic() -> None:
    t = Timing(every=timedelta(seconds=1))
    at = utc(2026, 1, 31, 7, 45, 12, 500000)
    assert latest_slot_at_or_before(t, at) == utc(2026, 1, 31, 7, 45, 12)
    assert next_slot(t, at) == utc(2026, 1, 31, 7, 45, 13)
    # A loop over a century of microsecond slots would never finish.
    tiny = Timing(every=MICROSECOND, anchor=utc(1926, 1, 1))
    assert latest_slot_at_or_before(tiny, at) == at
    assert next_slot(tiny, at) == at + MICROSECOND


def test_subsecond_interval() -> None:
    t = Timing(every=timedelta(milliseconds=500))
    assert window(t, utc(2026, 1, 1, 0, 0, 0, 1), utc(2026, 1, 1, 0, 0, 2)) == [
        utc(2026, 1, 1, 0, 0, 0, 500000),
        utc(2026, 1, 1, 0, 0, 1),
        utc(2026, 1, 1, 0, 0, 1, 500000),
        utc(2026, 1, 1, 0, 0, 2),
    ]


def test_interval_slots_between_bounds_and_limit() -> None:
    t = Timing(every=timedelta(minutes=5))
    start, end = utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 10, 20)
    assert slots_between(t, start, end, 100) == [start + k * timedelta(minutes=5) for k in range(5)]
    assert slots_between(t, start, end, 2) == [start, start + timedelta(minutes=5)]
    assert slots_between(t, start, end, 0) == []
    assert slots_between(t, end, start, 10) == []
    assert slots_between(t, start + MINUTE, start + 2 * MINUTE, 10) == []
    with pytest.raises(ValueError):
        slots_between(t, start, end, -1)


def test_no_slot_beyond_the_end_of_time() -> None:
    t = Timing(every=timedelta(days=1))
    assert next_slot(t, datetime.max.replace(tzinfo=UTC) - timedelta(hours=1)) is None
    assert latest_slot_at_or_before(t, datetime.max.replace(tzinfo=UTC)) == utc(9999, 12, 31)


def test_nominal_interval_of_interval_is_every() -> None:
    assert nominal_interval(Timing(every=timedelta(seconds=90)), utc(2026, 1, 1)) == timedelta(seconds=90)


# ---------------------------------------------------------------------------------------------------
# Cron schedules, away from daylight saving changes


def test_cron_next_and_latest() -> None:
    t = cron("*/15 * * * *")
    assert next_slot(t, utc(2026, 5, 4, 10, 7)) == utc(2026, 5, 4, 10, 15)
    assert next_slot(t, utc(2026, 5, 4, 10, 15)) == utc(2026, 5, 4, 10, 30)
    assert first_slot_at_or_after(t, utc(2026, 5, 4, 10, 15)) == utc(2026, 5, 4, 10, 15)
    assert first_slot_at_or_after(t, utc(2026, 5, 4, 10, 15, 0, 1)) == utc(2026, 5, 4, 10, 30)
    assert latest_slot_at_or_before(t, utc(2026, 5, 4, 10, 14, 59, 999999)) == utc(2026, 5, 4, 10, 0)
    assert latest_slot_at_or_before(t, utc(2026, 5, 4, 10, 15)) == utc(2026, 5, 4, 10, 15)
    assert latest_slot_at_or_before(t, utc(2026, 5, 4, 10, 15, 0, 1)) == utc(2026, 5, 4, 10, 15)


def test_cron_is_evaluated_in_its_zone() -> None:
    t = cron("0 2 * * *", BERLIN)
    assert next_slot(t, utc(2026, 7, 1, 12)) == utc(2026, 7, 2, 0)
    assert next_slot(t, utc(2026, 1, 1, 12)) == utc(2026, 1, 2, 1)
    assert latest_slot_at_or_before(t, utc(2026, 7, 1, 12)) == utc(2026, 7, 1, 0)


def test_six_fields_have_seconds_first() -> None:
    t = cron("*/20 * * * * *")
    assert window(t, utc(2026, 1, 1, 0, 0, 1), utc(2026, 1, 1, 0, 1, 0)) == [
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 40),
        utc(2026, 1, 1, 0, 1, 0),
    ]
    assert next_slot(cron("30 15 10 * * *"), utc(2026, 1, 1)) == utc(2026, 1, 1, 10, 15, 30)


@pytest.mark.parametrize(
    ("nickname", "expected"),
    [
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@monthly", utc(2026, 6, 1)),
        ("@weekly", utc(2026, 5, 10)),  # a Sunday
        ("@daily", utc(2026, 5, 5)),
        ("@midnight", utc(2026, 5, 5)),
        ("@hourly", utc(2026, 5, 4, 11)),
    ],
)
def test_nicknames(nickname: str, expected: datetime) -> None:
    assert next_slot(cron(nickname), utc(2026, 5, 4, 10, 30)) == expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 0 L 2 *", utc(2027, 2, 28)),
        ("0 0 LW 5 *", utc(2027, 5, 31)),
        ("0 0 LW 1 *", utc(2027, 1, 29)),  # 31 January 2027 is a Sunday
        ("0 0 * * 5L", utc(2026, 12, 25)),  # last Friday of December
        ("0 0 * * MON#2", utc(2026, 12, 14)),
        ("0 0 29 2 *", utc(2028, 2, 29)),
    ],
)
def test_special_day_syntax(expr: str, expected: datetime) -> None:
    assert next_slot(cron(expr), utc(2026, 12, 1)) == expected


def test_cron_slots_between_respects_limit() -> None:
    t = cron("* * * * *")
    slots = slots_between(t, utc(2026, 1, 1), utc(2026, 1, 2), 3)
    assert slots == [utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2)]
    assert slots_between(t, utc(2026, 1, 1, 0, 0, 1), utc(2026, 1, 1, 0, 0, 59), 3) == []


def test_nominal_interval_of_cron() -> None:
    assert nominal_interval(cron("*/15 * * * *"), utc(2026, 5, 4, 10, 7)) == timedelta(minutes=15)
    assert nominal_interval(cron("*/15 * * * *", BERLIN), utc(2026, 10, 25, 0, 50)) == timedelta(minutes=15)
    daily = cron("0 2 * * *", BERLIN)
    assert nominal_interval(daily, utc(2026, 6, 10, 12)) == timedelta(days=1)
    # The real gap across a change: one hour shorter in spring, one hour longer in autumn.
    assert nominal_interval(daily, utc(2026, 3, 29, 12)) == timedelta(hours=23)
    assert nominal_interval(daily, utc(2026, 10, 25, 12)) == timedelta(hours=25)
    assert nominal_interval(cron("0 * * * *", BERLIN), utc(2026, 3, 29, 0, 30)) == HOUR


def test_describe() -> None:
    assert describe(Timing(every=timedelta(minutes=5))) == "every 5m"
    assert describe(Timing(every=timedelta(hours=1, minutes=30))) == "every 1h30m"
    assert describe(Timing(every=timedelta(milliseconds=1500))) == "every 1s500ms"
    assert (
        describe(Timing(every=timedelta(minutes=5), anchor=utc(2026, 1, 1, 10, 2)))
        == "every 5m from 2026-01-01T10:02:00Z"
    )
    assert describe(cron("0 2 * * *", BERLIN)) == "cron 0 2 * * * (Europe/Berlin)"
    assert describe(cron(" @daily ")) == "cron @daily (UTC)"
    assert (
        describe(cron("30 2 * * *", BERLIN, dst_repeated="last", dst_missing="skip"))
        == "cron 30 2 * * * (Europe/Berlin, repeated times: last, missing times: skip)"
    )
    assert describe(Timing()) == "no schedule"


def test_describe_round_trips_through_parse_duration() -> None:
    for every in (timedelta(weeks=2, seconds=1), timedelta(milliseconds=1, microseconds=1), HOUR):
        assert parse_duration(describe(Timing(every=every)).removeprefix("every "), "every") == every


# ---------------------------------------------------------------------------------------------------
# Daylight saving: Europe/Berlin, 2026-10-25 03:00 CEST -> 02:00 CET (at 01:00Z)


def test_berlin_autumn_hourly_keeps_real_cadence() -> None:
    slots = window(cron("0 * * * *", BERLIN), utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))
    assert slots == [utc(2026, 10, 24, 22) + k * HOUR for k in range(7)]
    assert walls(slots, BERLIN) == [
        "00:00+02",
        "01:00+02",
        "02:00+02",
        "02:00+01",
        "03:00+01",
        "04:00+01",
        "05:00+01",
    ]


@pytest.mark.parametrize(
    ("repeated", "expected"), [("first", utc(2026, 10, 25, 0, 30)), ("last", utc(2026, 10, 25, 1, 30))]
)
def test_berlin_autumn_repeated_time_runs_once(repeated: str, expected: datetime) -> None:
    t = cron("30 2 * * *", BERLIN, dst_repeated=repeated)
    assert window(t, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12)) == [expected, utc(2026, 10, 26, 1, 30)]
    assert next_slot(t, utc(2026, 10, 24, 12)) == expected


def test_berlin_autumn_every_minute() -> None:
    slots = window(cron("* * * * *", BERLIN), utc(2026, 10, 25, 0), utc(2026, 10, 25, 2, 59, 59))
    assert len(slots) == 180
    assert all(b - a == MINUTE for a, b in zip(slots, slots[1:], strict=False))


@pytest.mark.parametrize(("repeated", "missing"), [("first", "shift"), ("last", "skip")])
def test_dst_options_do_not_change_cadence_expressions(repeated: str, missing: str) -> None:
    t = cron("0 * * * *", BERLIN, dst_repeated=repeated, dst_missing=missing)
    assert len(window(t, utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))) == 7
    assert window(t, utc(2026, 3, 28, 23), utc(2026, 3, 29, 2)) == [
        utc(2026, 3, 28, 23) + k * HOUR for k in range(4)
    ]


def test_queries_from_inside_the_repeated_hour() -> None:
    first = cron("30 2 * * *", BERLIN)
    last = cron("30 2 * * *", BERLIN, dst_repeated="last")
    first_pass = utc(2026, 10, 25, 0, 10)  # 02:10 CEST
    second_pass = utc(2026, 10, 25, 1, 10)  # 02:10 CET
    # The first occurrence (00:30Z) is already in the past at 02:10 CET.
    assert next_slot(first, second_pass) == utc(2026, 10, 26, 1, 30)
    assert latest_slot_at_or_before(first, second_pass) == utc(2026, 10, 25, 0, 30)
    assert next_slot(last, first_pass) == utc(2026, 10, 25, 1, 30)
    assert next_slot(last, utc(2026, 10, 25, 0, 40)) == utc(2026, 10, 25, 1, 30)
    assert latest_slot_at_or_before(last, utc(2026, 10, 25, 0, 40)) == utc(2026, 10, 24, 0, 30)
    assert latest_slot_at_or_before(last, utc(2026, 10, 25, 1, 40)) == utc(2026, 10, 25, 1, 30)
    every_20 = cron("*/20 * * * *", BERLIN)
    assert next_slot(every_20, second_pass) == utc(2026, 10, 25, 1, 20)
    assert latest_slot_at_or_before(every_20, second_pass) == utc(2026, 10, 25, 1, 0)
    assert next_slot(every_20, utc(2026, 10, 25, 0, 50)) == utc(2026, 10, 25, 1, 0)


def test_hour_steps_name_wall_clock_hours() -> None:
    start, end = utc(2026, 10, 24, 21), utc(2026, 10, 25, 4)
    # 02:00 occurs twice; an expression that does not cover all 24 hours runs it once.
    assert window(cron("0 0-23/2 * * *", BERLIN), start, end) == [
        utc(2026, 10, 24, 22),
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 3),
    ]
    assert walls(window(cron("30 */2 * * *", BERLIN, dst_repeated="last"), start, end), BERLIN) == [
        "00:30+02",
        "02:30+01",
        "04:30+01",
    ]


def test_seconds_field_keeps_real_cadence() -> None:
    slots = window(cron("*/20 * * * * *", BERLIN), utc(2026, 10, 25, 0), utc(2026, 10, 25, 2, 59, 59))
    assert len(slots) == 540
    assert all(b - a == timedelta(seconds=20) for a, b in zip(slots, slots[1:], strict=False))


def test_fixed_hour_with_seconds_field_follows_dst_options() -> None:
    day = (utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert window(cron("0 30 2 * * *", BERLIN), *day) == [utc(2026, 10, 25, 0, 30)]
    assert window(cron("0 30 2 * * *", BERLIN, dst_repeated="last"), *day) == [utc(2026, 10, 25, 1, 30)]
    spring = (utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
    assert window(cron("0 30 2 * * *", BERLIN), *spring) == [utc(2026, 3, 29, 1)]
    assert window(cron("0 30 2 * * *", BERLIN, dst_missing="skip"), *spring) == []


def test_fixed_hour_with_minute_wildcard() -> None:
    autumn = (utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert window(cron("* 2 * * *", BERLIN), *autumn) == [
        utc(2026, 10, 25, 0) + k * MINUTE for k in range(60)
    ]
    last = window(cron("* 2 * * *", BERLIN, dst_repeated="last"), *autumn)
    assert last == [utc(2026, 10, 25, 1) + k * MINUTE for k in range(60)]
    spring = (utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
    assert window(cron("* 2 * * *", BERLIN), *spring) == [utc(2026, 3, 29, 1)]
    assert window(cron("* 2 * * *", BERLIN, dst_missing="skip"), *spring) == []


# ---------------------------------------------------------------------------------------------------
# Daylight saving: Europe/Berlin, 2026-03-29 02:00 CET -> 03:00 CEST (at 01:00Z)


def test_berlin_spring_hourly_keeps_real_cadence() -> None:
    slots = window(cron("0 * * * *", BERLIN), utc(2026, 3, 28, 23), utc(2026, 3, 29, 2))
    assert slots == [utc(2026, 3, 28, 23) + k * HOUR for k in range(4)]
    assert walls(slots, BERLIN) == ["00:00+01", "01:00+01", "03:00+02", "04:00+02"]


def test_berlin_spring_missing_time_is_shifted_or_skipped() -> None:
    shift = cron("30 2 * * *", BERLIN)
    assert next_slot(shift, utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1)
    assert walls([utc(2026, 3, 29, 1)], BERLIN) == ["03:00+02"]
    assert latest_slot_at_or_before(shift, utc(2026, 3, 29, 12)) == utc(2026, 3, 29, 1)
    assert latest_slot_at_or_before(shift, utc(2026, 3, 29, 0, 59)) == utc(2026, 3, 28, 1, 30)
    skip = cron("30 2 * * *", BERLIN, dst_missing="skip")
    assert next_slot(skip, utc(2026, 3, 28, 12)) == utc(2026, 3, 30, 0, 30)
    assert latest_slot_at_or_before(skip, utc(2026, 3, 29, 12)) == utc(2026, 3, 28, 1, 30)


def test_berlin_spring_every_minute() -> None:
    slots = window(cron("* * * * *", BERLIN), utc(2026, 3, 29, 0), utc(2026, 3, 29, 2, 59, 59))
    assert len(slots) == 180
    assert all(b - a == MINUTE for a, b in zip(slots, slots[1:], strict=False))


@pytest.mark.parametrize("expr", ["0 2,3 * * *", "0,30 2 * * *", "0,30 2,3 * * *"])
def test_shifted_slot_coinciding_with_another_is_produced_once(expr: str) -> None:
    t = cron(expr, BERLIN)
    slots = window(t, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
    assert slots[0] == utc(2026, 3, 29, 1)
    assert slots == sorted(set(slots))
    assert next_slot(t, utc(2026, 3, 29, 1)) == (slots[1] if len(slots) > 1 else utc(2026, 3, 30, 0))


def test_two_and_three_oclock_on_the_spring_day() -> None:
    day = (utc(2026, 3, 28, 12), utc(2026, 3, 30, 12))
    expected = [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0), utc(2026, 3, 30, 1)]
    assert window(cron("0 2,3 * * *", BERLIN), *day) == expected
    assert window(cron("0 2,3 * * *", BERLIN, dst_missing="skip"), *day) == expected


# ---------------------------------------------------------------------------------------------------
# Daylight saving: America/New_York, 2026-03-08 02:00 EST -> 03:00 EDT (at 07:00Z)


def test_new_york_spring_hourly_keeps_real_cadence() -> None:
    slots = window(cron("0 * * * *", NEW_YORK), utc(2026, 3, 8, 5), utc(2026, 3, 8, 8))
    assert slots == [utc(2026, 3, 8, 5) + k * HOUR for k in range(4)]
    assert walls(slots, NEW_YORK) == ["00:00-05", "01:00-05", "03:00-04", "04:00-04"]


def test_new_york_spring_missing_time_is_shifted_or_skipped() -> None:
    assert next_slot(cron("30 2 * * *", NEW_YORK), utc(2026, 3, 7, 12)) == utc(2026, 3, 8, 7)
    skip = cron("30 2 * * *", NEW_YORK, dst_missing="skip")
    assert next_slot(skip, utc(2026, 3, 7, 12)) == utc(2026, 3, 9, 6, 30)


def test_new_york_spring_every_minute() -> None:
    slots = window(cron("* * * * *", NEW_YORK), utc(2026, 3, 8, 6), utc(2026, 3, 8, 8, 59, 59))
    assert len(slots) == 180


# ---------------------------------------------------------------------------------------------------
# Daylight saving: America/New_York, 2026-11-01 02:00 EDT -> 01:00 EST (at 06:00Z)


def test_new_york_autumn_hourly_keeps_real_cadence() -> None:
    slots = window(cron("0 * * * *", NEW_YORK), utc(2026, 11, 1, 4), utc(2026, 11, 1, 7))
    assert slots == [utc(2026, 11, 1, 4) + k * HOUR for k in range(4)]
    assert walls(slots, NEW_YORK) == ["00:00-04", "01:00-04", "01:00-05", "02:00-05"]


@pytest.mark.parametrize(
    ("repeated", "expected"), [("first", utc(2026, 11, 1, 5, 30)), ("last", utc(2026, 11, 1, 6, 30))]
)
def test_new_york_autumn_repeated_time_runs_once(repeated: str, expected: datetime) -> None:
    t = cron("30 1 * * *", NEW_YORK, dst_repeated=repeated)
    assert window(t, utc(2026, 10, 31, 12), utc(2026, 11, 2, 12)) == [expected, utc(2026, 11, 2, 6, 30)]


def test_new_york_autumn_every_minute() -> None:
    slots = window(cron("* * * * *", NEW_YORK), utc(2026, 11, 1, 5), utc(2026, 11, 1, 7, 59, 59))
    assert len(slots) == 180
    assert all(b - a == MINUTE for a, b in zip(slots, slots[1:], strict=False))


# ---------------------------------------------------------------------------------------------------
# Daylight saving: changes at midnight and by half an hour


def test_santiago_midnight_that_does_not_exist() -> None:
    # 2026-09-06 00:00 -04 -> 01:00 -03 (at 04:00Z).
    assert next_slot(cron("0 0 * * *", SANTIAGO), utc(2026, 9, 5, 12)) == utc(2026, 9, 6, 4)
    skip = cron("0 0 * * *", SANTIAGO, dst_missing="skip")
    assert next_slot(skip, utc(2026, 9, 5, 12)) == utc(2026, 9, 7, 3)


def test_lord_howe_half_hour_change() -> None:
    # 2026-10-04 02:00 +10:30 -> 02:30 +11:00 (at 15:30Z): 02:00 is shifted to 02:30, not 03:00.
    assert next_slot(cron("0 2 * * *", LORD_HOWE), utc(2026, 10, 3, 6)) == utc(2026, 10, 3, 15, 30)
    assert next_slot(cron("45 2 * * *", LORD_HOWE), utc(2026, 10, 3, 6)) == utc(2026, 10, 3, 15, 45)
    hourly = window(cron("0 * * * *", LORD_HOWE), utc(2026, 10, 3, 14), utc(2026, 10, 3, 17))
    assert hourly == [utc(2026, 10, 3, 14, 30), utc(2026, 10, 3, 16), utc(2026, 10, 3, 17)]


# ---------------------------------------------------------------------------------------------------
# Against a brute-force reference, around every 2026 change of four zones


TRANSITIONS = [
    (BERLIN, utc(2026, 3, 29, 1)),
    (BERLIN, utc(2026, 10, 25, 1)),
    (NEW_YORK, utc(2026, 3, 8, 7)),
    (NEW_YORK, utc(2026, 11, 1, 6)),
    (SANTIAGO, utc(2026, 4, 5, 3)),
    (SANTIAGO, utc(2026, 9, 6, 4)),
    (LORD_HOWE, utc(2026, 4, 4, 15)),
    (LORD_HOWE, utc(2026, 10, 3, 15, 30)),
]
CADENCE = ["0 * * * *", "*/20 * * * *", "15 0-23 * * *", "0 */1 * * *"]
FIXED = [
    "30 1 * * *",
    "30 2 * * *",
    "0 2,3 * * *",
    "0 0 * * *",
    "15 23,0,1 * * *",
    "30 */2 * * *",
    "0 1-23/3 * * *",
]
OPTIONS = [(r, m) for r in ("first", "last") for m in ("shift", "skip")]


def reference(
    expr: str, tz: ZoneInfo, start: datetime, end: datetime, repeated: str, missing: str
) -> list[datetime]:
    """Slots in [start, end] found by examining every minute of wall-clock and real time."""

    def matches(wall: datetime) -> bool:
        return next(CronSim(expr, wall - timedelta(seconds=1))) == wall

    cadence = len(CronSim(expr, start.replace(tzinfo=None)).hours) == 24
    slots = set()
    instant = start
    while instant <= end:
        wall = instant.astimezone(tz).replace(tzinfo=None, fold=0)
        if matches(wall):
            chosen = wall.replace(tzinfo=tz, fold=0 if repeated == "first" else 1).astimezone(UTC)
            if cadence or chosen == instant:
                slots.add(instant)
        instant += MINUTE
    if not cadence and missing == "shift":
        wall = start.astimezone(tz).replace(tzinfo=None) - 3 * HOUR
        while wall <= end.astimezone(tz).replace(tzinfo=None):
            exists = wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
            if not exists and matches(wall):
                instant = start - 3 * HOUR
                while instant.astimezone(tz).replace(tzinfo=None) < wall:
                    instant += MINUTE
                if start <= instant <= end:
                    slots.add(instant)
            wall += MINUTE
    return sorted(slots)


CASES = [(tz, at, expr, "first", "shift") for tz, at in TRANSITIONS for expr in CADENCE] + [
    (tz, at, expr, r, m) for tz, at in TRANSITIONS for expr in FIXED for r, m in OPTIONS
]


@pytest.mark.parametrize(("tz", "change", "expr", "repeated", "missing"), CASES)
def test_matches_reference_and_is_consistent(
    tz: str, change: datetime, expr: str, repeated: str, missing: str
) -> None:
    info = ZoneInfo(tz)
    assert (change - MICROSECOND).astimezone(info).utcoffset() != change.astimezone(info).utcoffset()
    t = cron(expr, tz, dst_repeated=repeated, dst_missing=missing)
    start, end = change - 4 * HOUR, change + 4 * HOUR
    slots = window(t, start, end)
    assert slots == reference(expr, info, start, end, repeated, missing)

    walked = []
    slot = first_slot_at_or_after(t, start)
    while slot is not None and slot <= end:
        walked.append(slot)
        slot = next_slot(t, slot)
    assert walked == slots

    for i, slot in enumerate(slots):
        assert first_slot_at_or_after(t, slot) == slot
        assert latest_slot_at_or_before(t, slot) == slot
        if i:
            assert latest_slot_at_or_before(t, slot - MICROSECOND) == slots[i - 1]

    # Query from every ten minutes of the window, which includes both passes of a repeated hour.
    query = start
    while query < end:
        following = [s for s in slots if s > query]
        preceding = [s for s in slots if s <= query]
        if following:
            assert next_slot(t, query) == following[0]
        if preceding:
            assert latest_slot_at_or_before(t, query) == preceding[-1]
        query += 10 * MINUTE


# ---------------------------------------------------------------------------------------------------
# The daylight saving rule, as docs/reference/cron.md states it, with explicit instants: an
# expression covering all 24 hours fires at every instant its wall time matches; one covering fewer
# hours names wall-clock times, each run once (dst_repeated) or shifted/skipped (dst_missing).

ALL_HOURS = "0 " + ",".join(str(h) for h in range(24)) + " * * *"


def instants(*texts: str) -> list[datetime]:
    return [datetime.fromisoformat(text).astimezone(UTC) for text in texts]


def half_hours(first: str, count: int) -> list[datetime]:
    start = datetime.fromisoformat(first).astimezone(UTC)
    return [start + k * timedelta(minutes=30) for k in range(count)]


DST_RULE = [
    # Europe/Berlin, 2026-03-29 02:00 CET -> 03:00 CEST
    (
        BERLIN,
        utc(2026, 3, 29, 1),
        "0 * * * *",
        {},
        instants(
            "2026-03-28T23:00+01:00",
            "2026-03-29T00:00+01:00",
            "2026-03-29T01:00+01:00",
            "2026-03-29T03:00+02:00",
            "2026-03-29T04:00+02:00",
            "2026-03-29T05:00+02:00",
            "2026-03-29T06:00+02:00",
        ),
    ),
    (
        BERLIN,
        utc(2026, 3, 29, 1),
        ALL_HOURS,
        {},
        instants(
            "2026-03-28T23:00+01:00",
            "2026-03-29T00:00+01:00",
            "2026-03-29T01:00+01:00",
            "2026-03-29T03:00+02:00",
            "2026-03-29T04:00+02:00",
            "2026-03-29T05:00+02:00",
            "2026-03-29T06:00+02:00",
        ),
    ),
    (
        BERLIN,
        utc(2026, 3, 29, 1),
        "0 */2 * * *",
        {},
        instants(
            "2026-03-29T00:00+01:00",
            "2026-03-29T03:00+02:00",
            "2026-03-29T04:00+02:00",
            "2026-03-29T06:00+02:00",
        ),
    ),
    (
        BERLIN,
        utc(2026, 3, 29, 1),
        "0 */2 * * *",
        {"dst_missing": "skip"},
        instants("2026-03-29T00:00+01:00", "2026-03-29T04:00+02:00", "2026-03-29T06:00+02:00"),
    ),
    (BERLIN, utc(2026, 3, 29, 1), "30 2 * * *", {}, instants("2026-03-29T03:00+02:00")),
    (BERLIN, utc(2026, 3, 29, 1), "30 2 * * *", {"dst_missing": "skip"}, []),
    # Europe/Berlin, 2026-10-25 03:00 CEST -> 02:00 CET
    (
        BERLIN,
        utc(2026, 10, 25, 1),
        "0 * * * *",
        {},
        instants(
            "2026-10-25T00:00+02:00",
            "2026-10-25T01:00+02:00",
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:00+01:00",
            "2026-10-25T03:00+01:00",
            "2026-10-25T04:00+01:00",
            "2026-10-25T05:00+01:00",
        ),
    ),
    (
        BERLIN,
        utc(2026, 10, 25, 1),
        ALL_HOURS,
        {},
        instants(
            "2026-10-25T00:00+02:00",
            "2026-10-25T01:00+02:00",
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:00+01:00",
            "2026-10-25T03:00+01:00",
            "2026-10-25T04:00+01:00",
            "2026-10-25T05:00+01:00",
        ),
    ),
    (
        BERLIN,
        utc(2026, 10, 25, 1),
        "0 */2 * * *",
        {},
        instants("2026-10-25T00:00+02:00", "2026-10-25T02:00+02:00", "2026-10-25T04:00+01:00"),
    ),
    (
        BERLIN,
        utc(2026, 10, 25, 1),
        "0 */2 * * *",
        {"dst_repeated": "last"},
        instants("2026-10-25T00:00+02:00", "2026-10-25T02:00+01:00", "2026-10-25T04:00+01:00"),
    ),
    (BERLIN, utc(2026, 10, 25, 1), "30 2 * * *", {}, instants("2026-10-25T02:30+02:00")),
    (
        BERLIN,
        utc(2026, 10, 25, 1),
        "30 2 * * *",
        {"dst_repeated": "last"},
        instants("2026-10-25T02:30+01:00"),
    ),
    # America/New_York, 2026-03-08 02:00 EST -> 03:00 EDT
    (
        NEW_YORK,
        utc(2026, 3, 8, 7),
        "0 * * * *",
        {},
        instants(
            "2026-03-07T23:00-05:00",
            "2026-03-08T00:00-05:00",
            "2026-03-08T01:00-05:00",
            "2026-03-08T03:00-04:00",
            "2026-03-08T04:00-04:00",
            "2026-03-08T05:00-04:00",
            "2026-03-08T06:00-04:00",
        ),
    ),
    (NEW_YORK, utc(2026, 3, 8, 7), "*/30 * * * *", {}, half_hours("2026-03-07T23:00-05:00", 13)),
    (
        NEW_YORK,
        utc(2026, 3, 8, 7),
        "0 */3 * * *",
        {},
        instants("2026-03-08T00:00-05:00", "2026-03-08T03:00-04:00", "2026-03-08T06:00-04:00"),
    ),
    (NEW_YORK, utc(2026, 3, 8, 7), "30 2 * * *", {}, instants("2026-03-08T03:00-04:00")),
    (NEW_YORK, utc(2026, 3, 8, 7), "30 2 * * *", {"dst_missing": "skip"}, []),
    # America/New_York, 2026-11-01 02:00 EDT -> 01:00 EST
    (
        NEW_YORK,
        utc(2026, 11, 1, 6),
        "0 * * * *",
        {},
        instants(
            "2026-10-31T23:00-04:00",
            "2026-11-01T00:00-04:00",
            "2026-11-01T01:00-04:00",
            "2026-11-01T01:00-05:00",
            "2026-11-01T02:00-05:00",
            "2026-11-01T03:00-05:00",
            "2026-11-01T04:00-05:00",
        ),
    ),
    (
        NEW_YORK,
        utc(2026, 11, 1, 6),
        ALL_HOURS,
        {},
        instants(
            "2026-10-31T23:00-04:00",
            "2026-11-01T00:00-04:00",
            "2026-11-01T01:00-04:00",
            "2026-11-01T01:00-05:00",
            "2026-11-01T02:00-05:00",
            "2026-11-01T03:00-05:00",
            "2026-11-01T04:00-05:00",
        ),
    ),
    (
        NEW_YORK,
        utc(2026, 11, 1, 6),
        "0 1-23/3 * * *",
        {},
        instants("2026-11-01T01:00-04:00", "2026-11-01T04:00-05:00"),
    ),
    (
        NEW_YORK,
        utc(2026, 11, 1, 6),
        "0 1-23/3 * * *",
        {"dst_repeated": "last"},
        instants("2026-11-01T01:00-05:00", "2026-11-01T04:00-05:00"),
    ),
    (NEW_YORK, utc(2026, 11, 1, 6), "30 1 * * *", {}, instants("2026-11-01T01:30-04:00")),
    (
        NEW_YORK,
        utc(2026, 11, 1, 6),
        "30 1 * * *",
        {"dst_repeated": "last"},
        instants("2026-11-01T01:30-05:00"),
    ),
    # Australia/Lord_Howe, 2026-04-05 02:00 +11:00 -> 01:30 +10:30
    (
        LORD_HOWE,
        utc(2026, 4, 4, 15),
        "0 * * * *",
        {},
        instants(
            "2026-04-04T23:00+11:00",
            "2026-04-05T00:00+11:00",
            "2026-04-05T01:00+11:00",
            "2026-04-05T02:00+10:30",
            "2026-04-05T03:00+10:30",
            "2026-04-05T04:00+10:30",
        ),
    ),
    (LORD_HOWE, utc(2026, 4, 4, 15), "*/30 * * * *", {}, half_hours("2026-04-04T23:00+11:00", 13)),
    (
        LORD_HOWE,
        utc(2026, 4, 4, 15),
        "0 */2 * * *",
        {},
        instants("2026-04-05T00:00+11:00", "2026-04-05T02:00+10:30", "2026-04-05T04:00+10:30"),
    ),
    (LORD_HOWE, utc(2026, 4, 4, 15), "45 1 * * *", {}, instants("2026-04-05T01:45+11:00")),
    (
        LORD_HOWE,
        utc(2026, 4, 4, 15),
        "45 1 * * *",
        {"dst_repeated": "last"},
        instants("2026-04-05T01:45+10:30"),
    ),
    # Australia/Lord_Howe, 2026-10-04 02:00 +10:30 -> 02:30 +11:00
    (
        LORD_HOWE,
        utc(2026, 10, 3, 15, 30),
        "0 * * * *",
        {},
        instants(
            "2026-10-03T23:00+10:30",
            "2026-10-04T00:00+10:30",
            "2026-10-04T01:00+10:30",
            "2026-10-04T03:00+11:00",
            "2026-10-04T04:00+11:00",
            "2026-10-04T05:00+11:00",
        ),
    ),
    (LORD_HOWE, utc(2026, 10, 3, 15, 30), "*/30 * * * *", {}, half_hours("2026-10-03T23:00+10:30", 13)),
    (
        LORD_HOWE,
        utc(2026, 10, 3, 15, 30),
        "0 */2 * * *",
        {},
        instants("2026-10-04T00:00+10:30", "2026-10-04T02:30+11:00", "2026-10-04T04:00+11:00"),
    ),
    (LORD_HOWE, utc(2026, 10, 3, 15, 30), "15 2 * * *", {}, instants("2026-10-04T02:30+11:00")),
    (LORD_HOWE, utc(2026, 10, 3, 15, 30), "15 2 * * *", {"dst_missing": "skip"}, []),
]


@pytest.mark.parametrize(("tz", "change", "expr", "options", "expected"), DST_RULE)
def test_dst_rule_with_explicit_instants(
    tz: str, change: datetime, expr: str, options: dict[str, str], expected: list[datetime]
) -> None:
    t = cron(expr, tz, **options)
    assert window(t, change - 3 * HOUR, change + 3 * HOUR) == expected
    # Walking slot to slot from before the change gives the same instants.
    walked, slot = [], first_slot_at_or_after(t, change - 3 * HOUR)
    while slot is not None and slot <= change + 3 * HOUR:
        walked.append(slot)
        slot = next_slot(t, slot)
    assert walked == expected


@pytest.mark.parametrize("expr", ["0 * * * *", "0 */1 * * *", "0 0-23 * * *", ALL_HOURS, "*/20 * * * *"])
def test_every_spelling_of_all_hours_keeps_the_real_cadence(expr: str) -> None:
    for change in (utc(2026, 3, 29, 1), utc(2026, 10, 25, 1)):
        slots = window(cron(expr, BERLIN), change - 3 * HOUR, change + 3 * HOUR)
        gaps = {b - a for a, b in zip(slots, slots[1:], strict=False)}
        assert gaps == ({timedelta(minutes=20)} if "/20" in expr else {HOUR})


@pytest.mark.parametrize("expr", ["0 */2 * * *", "0 0-22 * * *", "0 0,2,4,6,8,10,12,14,16,18,20,22 * * *"])
def test_fewer_hours_never_run_a_wall_time_twice(expr: str) -> None:
    slots = window(cron(expr, BERLIN), utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    local = [s.astimezone(ZoneInfo(BERLIN)).replace(tzinfo=None) for s in slots]
    assert len(local) == len(set(local))
