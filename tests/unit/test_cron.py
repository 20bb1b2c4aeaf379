"""Unit tests for fleet.timing.cron: every form of every field means what it means in cron, whatever
cronsim would make of it, and lenient forms are either given their documented meaning or refused."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim

from fleet.errors import ScheduleFileError
from fleet.timing.cron import CronError, parse
from fleet.timing.schedfile import load
from fleet.timing.schedule import Timing, TimingError, slots_between, validate_timing


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# Each field is exercised alone, with the others fixed, over a window holding each of its values
# once: a minute of seconds, an hour of minutes, a day of hours, January 2026 (31 days, Thursday
# 1st to Saturday 31st), the months of 2026, and the week from Sunday 4 to Saturday 10 January.
FIELD_PROBES: dict[str, tuple[str, datetime, datetime, Callable[[datetime], int]]] = {
    "second": ("{} * * * * *", utc(2026, 1, 5), utc(2026, 1, 5, 0, 0, 59), lambda s: s.second),
    "minute": ("{} * * * *", utc(2026, 1, 5), utc(2026, 1, 5, 0, 59), lambda s: s.minute),
    "hour": ("0 {} * * *", utc(2026, 1, 5), utc(2026, 1, 5, 23), lambda s: s.hour),
    "day": ("0 0 {} * *", utc(2026, 1, 1), utc(2026, 1, 31), lambda s: s.day),
    "month": ("0 0 1 {} *", utc(2026, 1, 1), utc(2026, 12, 31), lambda s: s.month),
    "weekday": ("0 0 * * {}", utc(2026, 1, 4), utc(2026, 1, 10), lambda s: s.isoweekday() % 7),
}

FORMS = [
    # second
    ("second", "*", set(range(60))),
    ("second", "7", {7}),
    ("second", "10-12", {10, 11, 12}),
    ("second", "10-20/5", {10, 15, 20}),
    ("second", "10-10/5", {10}),
    ("second", "*/20", {0, 20, 40}),
    ("second", "50/5", {50, 55}),
    ("second", "1,2-3,40-50/5,*/30", {0, 1, 2, 3, 30, 40, 45, 50}),
    # minute
    ("minute", "*", set(range(60))),
    ("minute", "5", {5}),
    ("minute", "5-7", {5, 6, 7}),
    ("minute", "0-30/10", {0, 10, 20, 30}),
    ("minute", "5-5/15", {5}),
    ("minute", "59-59/1", {59}),
    ("minute", "*/15", {0, 15, 30, 45}),
    ("minute", "*/60", {0}),
    ("minute", "5/15", {5, 20, 35, 50}),
    ("minute", "0-10/30", {0}),
    ("minute", "05", {5}),
    ("minute", "5-5/15,30-30/2,*/20", {0, 5, 20, 30, 40}),
    # hour
    ("hour", "*", set(range(24))),
    ("hour", "3", {3}),
    ("hour", "9-17", set(range(9, 18))),
    ("hour", "9-17/4", {9, 13, 17}),
    ("hour", "10-10/2", {10}),
    ("hour", "*/6", {0, 6, 12, 18}),
    ("hour", "*/1", set(range(24))),
    ("hour", "*/24", {0}),
    ("hour", "20/2", {20, 22}),
    ("hour", "1,3-4,10-10/2,*/12", {0, 1, 3, 4, 10, 12}),
    # day of month
    ("day", "*", set(range(1, 32))),
    ("day", "15", {15}),
    ("day", "1-3", {1, 2, 3}),
    ("day", "1-10/3", {1, 4, 7, 10}),
    ("day", "5-5/7", {5}),
    ("day", "*/10", {1, 11, 21, 31}),
    ("day", "25/3", {25, 28, 31}),
    ("day", "L", {31}),
    ("day", "LW", {30}),  # 31 January 2026 is a Saturday
    ("day", "1,L,10-10/5", {1, 10, 31}),
    # month
    ("month", "*", set(range(1, 13))),
    ("month", "6", {6}),
    ("month", "jun-aug", {6, 7, 8}),
    ("month", "1-12/3", {1, 4, 7, 10}),
    ("month", "2-2/3", {2}),
    ("month", "*/4", {1, 5, 9}),
    ("month", "nov/1", {11, 12}),
    ("month", "JAN,mar-Apr,10-10/2", {1, 3, 4, 10}),
    # day of week
    ("weekday", "*", set(range(7))),
    ("weekday", "1", {1}),
    ("weekday", "0", {0}),
    ("weekday", "7", {0}),
    ("weekday", "mon-fri", {1, 2, 3, 4, 5}),
    ("weekday", "1-5/2", {1, 3, 5}),
    ("weekday", "1-1/2", {1}),
    ("weekday", "mon-mon/2", {1}),
    ("weekday", "*/2", {0, 2, 4, 6}),
    ("weekday", "*/7", {0}),
    ("weekday", "5-7", {5, 6, 0}),
    ("weekday", "sun,wed-thu", {0, 3, 4}),
    ("weekday", "tue/2", {2, 4, 6}),
    ("weekday", "1/2", {1, 3, 5, 0}),  # 1-7/2, and 7 is Sunday
]


@pytest.mark.parametrize(("field", "term", "expected"), FORMS)
def test_every_form_fires_at_cron_values(field: str, term: str, expected: set[int]) -> None:
    pattern, start, end, value = FIELD_PROBES[field]
    expr = pattern.format(term)
    validate_timing(Timing(cron=expr))
    slots = slots_between(Timing(cron=expr), start, end, 10_000)
    assert {value(s) for s in slots} == expected
    assert len(slots) == len(expected)


@pytest.mark.parametrize(("field", "term", "expected"), FORMS)
def test_cronsim_reads_the_handed_form_as_fleet_does(field: str, term: str, expected: set[int]) -> None:
    pattern, start, _, _ = FIELD_PROBES[field]
    parsed = parse(pattern.format(term))
    sim = CronSim(parsed.expr, start.replace(tzinfo=None))
    assert sim.seconds == parsed.seconds and sim.minutes == parsed.minutes and sim.hours == parsed.hours
    assert sim.months == parsed.months
    assert {d for d in sim.days if d > 0} == {d for d in parsed.days if isinstance(d, int)}
    weekdays = {w % 7 if isinstance(w, int) else w for w in sim.weekdays}
    assert weekdays == {w for w in parsed.weekdays if isinstance(w, int)}


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        # The forms cronsim reads as running to the end of the field.
        ("0 10-10/2 * * *", utc(2026, 1, 5), [utc(2026, 1, 5, 10), utc(2026, 1, 6, 10)]),
        ("0 0 * * 1-1/2", utc(2026, 1, 4), [utc(2026, 1, 5), utc(2026, 1, 12)]),
        ("5-5/15 * * * *", utc(2026, 1, 5), [utc(2026, 1, 5, 0, 5), utc(2026, 1, 5, 1, 5)]),
    ],
)
def test_a_single_value_range_with_a_step_is_that_value(
    expr: str, start: datetime, expected: list[datetime]
) -> None:
    assert slots_between(Timing(cron=expr), start, start + timedelta(days=8), 2) == expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 0 * * 5L", [utc(2026, 1, 30), utc(2026, 2, 27)]),
        ("0 0 * * friL", [utc(2026, 1, 30), utc(2026, 2, 27)]),
        ("0 0 * * 0L", [utc(2026, 1, 25), utc(2026, 2, 22)]),
        ("0 0 * * 7L", [utc(2026, 1, 25), utc(2026, 2, 22)]),
        ("0 0 * * 1#2", [utc(2026, 1, 12), utc(2026, 2, 9)]),
        ("0 0 * * fri#1", [utc(2026, 1, 2), utc(2026, 2, 6)]),
        ("0 0 * * 1#5,5L", [utc(2026, 1, 30), utc(2026, 2, 27)]),
        ("0 0 L * *", [utc(2026, 1, 31), utc(2026, 2, 28)]),
        ("0 0 LW * *", [utc(2026, 1, 30), utc(2026, 2, 27)]),
        # Day of month and day of week both restricted: either matches.
        ("0 0 13 * 5", [utc(2026, 1, 2), utc(2026, 1, 9)]),
        # One of them starting with *: both must match (Debian cron), even as */2.
        ("0 0 */2 * 5", [utc(2026, 1, 9), utc(2026, 1, 23)]),
        ("0 0 1-31/2 * 5", [utc(2026, 1, 1), utc(2026, 1, 2)]),
        ("0 0 13 * *", [utc(2026, 1, 13), utc(2026, 2, 13)]),
    ],
)
def test_special_days_and_the_day_fields_together(expr: str, expected: list[datetime]) -> None:
    validate_timing(Timing(cron=expr))
    assert slots_between(Timing(cron=expr), utc(2026, 1, 1), utc(2026, 12, 31), 2) == expected


@pytest.mark.parametrize(
    ("expr", "fields"),
    [
        ("@hourly", "0 0 * * * *"),
        ("@DAILY", "0 0 0 * * *"),
        ("  0\t2 * * *  ", "0 0 2 * * *"),
        ("0 2 * * *\n", "0 0 2 * * *"),
        ("*/20 * * * * *", "*/20 * * * * *"),
    ],
)
def test_nicknames_blanks_and_seconds(expr: str, fields: str) -> None:
    assert parse(expr).expr == fields


# ---------------------------------------------------------------------------------------------------
# Lenient forms: refused with one line naming the field, or read as documented


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("*/61 * * * *", "minute field: step 61 is larger than the 60 values of the field"),
        ("0 */25 * * *", "hour field: step 25 is larger than the 24 values of the field"),
        ("0 0 * * */8", "day-of-week field: step 8 is larger than the 7 values of the field"),
        ("0 0 L/2 * *", "day-of-month field: a step cannot follow L (L/2)"),
        ("0 0 LW/2 * *", "day-of-month field: a step cannot follow LW (LW/2)"),
        ("0 0 * * 5L/2", "day-of-week field: a step cannot follow 5L (5L/2)"),
        ("*/0 * * * *", "minute field: a step must be at least 1, not 0"),
        ("0-59/0 * * * *", "minute field: a step must be at least 1, not 0"),
        ("5/x * * * *", "minute field: step 'x' is not a whole number"),
        ("60 * * * *", "minute field: 60 is out of range 0-59"),
        ("0 24 * * *", "hour field: 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field: 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month field: 32 is out of range 1-31"),
        ("0 0 1 0 *", "month field: 0 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field: 8 is out of range 0-7"),
        ("0 20-25 * * *", "hour field: 25 is out of range 0-23"),
        ("0 22-2 * * *", "hour field: range 22-2 goes backwards; write it as two ranges"),
        ("0 0 * * fri-mon", "day-of-week field: range fri-mon goes backwards; write it as two ranges"),
        ("0 0 * mon *", "month field: 'mon' is not a value"),
        ("1,,2 * * * *", "minute field: empty item in a list"),
        ("0 0 15W * *", "day-of-month field: W is supported only as LW, the last weekday of the month (15W)"),
        ("0 0 ? * *", "day-of-month field: ? is not cron; write *"),
        ("0 0 * * L", "day-of-week field: L needs a weekday before it, e.g. 5L for the last Friday"),
        ("0 0 * * 1#6", "day-of-week field: the week in 1#6 must be 1 to 5"),
        ("0 0 5L * *", "day-of-month field: '5L' is not a value"),
        ("0 L * * *", "hour field: 'L' is not a value"),
        ("0\u00a02 * * *", "white space U+00A0 NO-BREAK SPACE between fields; separate them with spaces"),
        ("0\u20032 * * *", "white space U+2003 EM SPACE between fields; separate them with spaces"),
        ("0 2 *\u3000* *", "white space U+3000 IDEOGRAPHIC SPACE between fields; separate them with spaces"),
        ("0 2\n* * *", "white space U+000A between fields; separate them with spaces"),
        ("０ 2 * * *", "unexpected character U+FF10 FULLWIDTH DIGIT ZERO"),
    ],
)
def test_lenient_forms_are_refused_naming_the_field(expr: str, reason: str) -> None:
    with pytest.raises(CronError) as parsed:
        parse(expr)
    assert str(parsed.value).startswith(reason)
    with pytest.raises(TimingError) as validated:
        validate_timing(Timing(cron=expr))
    message = str(validated.value)
    assert message.startswith(f"cron: {reason}") and "\n" not in message


def test_the_schedules_file_reports_one_line_naming_the_cron_field() -> None:
    text = '[[schedule]]\nname = "a"\ncron = "*/61 * * * *"\njob = "j"\n'
    text += '[[schedule]]\nname = "b"\ncron = "0\u00a02 * * *"\njob = "j"\n'
    with pytest.raises(ScheduleFileError) as e:
        load(text)
    assert e.value.problems == [
        "schedule 'a': cron: minute field: step 61 is larger than the 60 values of the field, so it"
        ' would fire only at the first (use `every` for an interval) ("*/61 * * * *")',
        "schedule 'b': cron: white space U+00A0 NO-BREAK SPACE between fields; separate them with"
        ' spaces or tabs ("0\\xa02 * * *")',
    ]


@pytest.mark.parametrize(
    ("expr", "first_two"),
    [
        ("*/61 * * * *", [utc(2026, 1, 5, 0), utc(2026, 1, 5, 1)]),
        ("0 0 L/2 * *", [utc(2026, 1, 31), utc(2026, 2, 28)]),
        ("0\u00a02 * * *", [utc(2026, 1, 5, 2), utc(2026, 1, 6, 2)]),
    ],
)
def test_stored_schedules_keep_the_meaning_they_had(expr: str, first_two: list[datetime]) -> None:
    # A schedule stored before these forms were refused still has slots, so no ticker stops on it.
    with pytest.raises(TimingError):
        validate_timing(Timing(cron=expr))
    assert slots_between(Timing(cron=expr), utc(2026, 1, 5), utc(2026, 12, 31), 2) == first_two


# ---------------------------------------------------------------------------------------------------
# Random lists of every form, against a reference written from Vixie cron's get_range


REFERENCE_FIELDS = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]  # low and high of the six


def reference_term(low: int, high: int, term: str) -> set[int]:
    """Vixie cron's range: * or a[-b], then an optional /step; and a/s read as a-high/s."""
    body, _, step_text = term.partition("/")
    step = int(step_text) if step_text else 1
    if body == "*":
        first, last = low, high
    elif "-" in body:
        first, last = (int(part) for part in body.split("-"))
    else:
        first = int(body)
        last = high if step_text else first
    return set(range(first, last + 1, step))


def random_term(rng: random.Random, low: int, high: int, size: int) -> str:
    a = rng.randint(low, high)
    b = rng.randint(a, high)
    s = rng.randint(1, size)
    return rng.choice([f"{a}", f"{a}-{b}", f"{a}-{b}/{s}", f"{a}-{a}/{s}", f"*/{s}", f"{a}/{s}", "*"])


@pytest.mark.parametrize("seed", range(20))
def test_random_lists_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    fields = []
    expected: list[set[int]] = []
    for low, high in REFERENCE_FIELDS:
        size = 7 if high == 7 else high - low + 1
        terms = [random_term(rng, low, high, size) for _ in range(rng.randint(1, 3))]
        fields.append(",".join(terms))
        expected.append(set().union(*(reference_term(low, high, t) for t in terms)))
    parsed = parse(" ".join(fields))
    expected[5] = {w % 7 for w in expected[5]}
    got = [parsed.seconds, parsed.minutes, parsed.hours, parsed.days, parsed.months, parsed.weekdays]
    assert got == expected, fields
    sim = CronSim(parsed.expr, datetime(2026, 1, 1))
    by_cronsim = [
        sim.seconds,
        sim.minutes,
        sim.hours,
        sim.days,
        sim.months,
        {w % 7 for w in sim.weekdays if isinstance(w, int)},
    ]
    assert by_cronsim == expected, (fields, parsed.expr)
