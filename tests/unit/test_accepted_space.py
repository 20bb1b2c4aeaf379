"""The whole accepted input space of a schedule, planned as the ticker plans it.

Entries are generated over every form `parse_entry` accepts (intervals of odd sizes up to the
bounds, cron in every field form and dialect extension, odd time zones, start_at near 1970 and 3000,
naive and aware, grace, max_lateness, max_catchup and spread at their bounds); those it refuses are
dropped.
Each is then stored as apply stores it and planned with `plan_slots` at instants from its first slot
to decades later, with the ticker's default limit and lookahead, and the plan must keep its bounds:
never raise (but TimingError), at most `limit` slots per call, at most `max_catchup` due slots
(counted as slots) under every policy, nothing older than the grace under skip, at most one missed
slot under latest (lateness counted from each slot plus the spread offset), real slots strictly
increasing within [next_run_at, now + lookahead], the slots folded into a run real slots before
it, and a bounded cost per call. An independent enumeration of slots (interval arithmetic, and cron matched
instant by instant on the UTC time line) checks `slots_between` itself.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, event, example, given, note, settings
from hypothesis import strategies as st

from fleet.process.settings import DEFAULT_CATCHUP_LIMIT, DEFAULT_LOOKAHEAD_S
from fleet.timing.calendars import first_open_slot
from fleet.timing.catchup import Plan, StaleRun, plan_slots, settle_stale
from fleet.timing.cron import parse as parse_cron
from fleet.timing.schedfile import MAX_EVERY, ScheduleSpec, default_grace, parse_entry
from fleet.timing.schedule import (
    Timing,
    TimingError,
    first_slot_at_or_after,
    latest_slot_at_or_before,
    next_slot,
    nominal_interval,
    saturating_add,
    slots_between,
)
from tests.support import slowness

T = TypeVar("T")

LIMIT = DEFAULT_CATCHUP_LIMIT
LOOKAHEAD = timedelta(seconds=DEFAULT_LOOKAHEAD_S)
# What "never fires" means for apply: no slot in the ten years (MAX_EVERY) after max(now, start_at).
HORIZON = MAX_EVERY
# The cost of one call, in CPU seconds: generous slack over what a call costs when it is bounded
# (tens of milliseconds; CI machines are loaded), far below an unbounded walk (seconds to minutes),
# scaled by how much slower this machine is (tests.support.slowness).
CALL_BUDGET_S = 2.0
US = timedelta(microseconds=1)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
YEAR = timedelta(days=365)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Every property file runs the same examples, so CI is reproducible.
PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
# Planning is cheap per example when bounded: the planning properties see more of the space.
PLANNING = settings(PROPERTY, max_examples=1500)

# ---------------------------------------------------------------------------------------------------
# Strategies: the accepted input space

ZONES = (
    "UTC",
    "Pacific/Apia",  # skipped 30 December 2011, a whole day
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kathmandu",  # +05:45
    "Australia/Lord_Howe",  # 30-minute DST
    "Africa/Casablanca",  # DST suspended every Ramadan
    "America/St_Johns",  # -03:30
    "Antarctica/Troll",  # +00 / +02
    "Etc/GMT+12",
    "Pacific/Kiritimati",  # +14
    "America/New_York",
    "Europe/Berlin",
    "America/Santiago",
)
# Zones whose offset never changes in the range the oracle looks at (1986 on for Kathmandu).
FIXED_ZONES = ("UTC", "Etc/GMT+12", "Etc/GMT-14", "Asia/Kathmandu")
DST_ZONES = (
    "America/New_York",
    "Europe/Berlin",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "America/St_Johns",
    "Pacific/Apia",
)

# Expressions known to sit at an edge: sparse, dense at times, inside DST gaps, special day forms.
CURATED_CRONS = (
    "0 0 29 2 *",
    "0 0 * 2 1#5",
    "0 0 29 2 1",
    "59 23 31 12 *",
    "30 2 * * *",
    "* 2 8-14 3 0",
    "* 2 * 3 0#2",
    "30 2 * 3 0#2",
    "0,30 2 * 3,11 0",
    "* * * 9-10 *",
    "* * 1 1 *",
    "* * * * *",
    "*/7 * * * * *",
    "59 59 23 L 12 *",
    "0 0 LW * *",
    "0 12 * * 5L",
    "0 0 L 2 *",
    "0 0 1 1 *",
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
    "0 0 30 12 *",
    "0 */5 * * *",
    "15 30 * * * *",
)
NICKNAMES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@DAILY")
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def _value(low: int, high: int, names: tuple[str, ...]) -> st.SearchStrategy[str]:
    numbers = st.integers(low, high).map(str)
    if not names:
        return numbers
    return st.one_of(numbers, st.sampled_from(names))


@st.composite
def _range(draw: st.DrawFn, low: int, high: int) -> tuple[int, int]:
    a = draw(st.integers(low, high))
    b = draw(st.integers(a, high))
    return a, b


def _term(low: int, high: int, size: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    step = st.integers(1, size)
    return st.one_of(
        st.just("*"),
        step.map(lambda s: f"*/{s}"),
        _value(low, high, names),
        _range(low, high).map(lambda r: f"{r[0]}-{r[1]}"),
        st.tuples(_range(low, high), step).map(lambda r: f"{r[0][0]}-{r[0][1]}/{r[1]}"),
        st.tuples(st.integers(low, high), step).map(lambda r: f"{r[0]}/{r[1]}"),
    )


def _field(term: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(term, min_size=1, max_size=3).map(",".join)


SECONDS_FIELD = _field(_term(0, 59, 60))
MINUTES_FIELD = _field(_term(0, 59, 60))
HOURS_FIELD = _field(_term(0, 23, 24))
DAYS_FIELD = st.one_of(_field(_term(1, 31, 31)), st.sampled_from(["L", "LW", "L,15", "1,LW"]))
MONTHS_FIELD = _field(_term(1, 12, 12, MONTH_NAMES))
WEEKDAYS_FIELD = st.one_of(
    _field(_term(0, 7, 7, DAY_NAMES)),
    st.tuples(st.integers(0, 7), st.integers(1, 5)).map(lambda r: f"{r[0]}#{r[1]}"),
    st.integers(0, 7).map(lambda d: f"{d}L"),
    st.sampled_from(["FRIL", "MON#1", "0#5,6#5", "1-5"]),
)


@st.composite
def generated_cron(draw: st.DrawFn) -> str:
    """Five fields, or six with seconds first; each field in any of its forms."""
    fields = [
        draw(MINUTES_FIELD),
        draw(HOURS_FIELD),
        draw(st.one_of(st.just("*"), DAYS_FIELD)),
        draw(st.one_of(st.just("*"), MONTHS_FIELD)),
        draw(st.one_of(st.just("*"), WEEKDAYS_FIELD)),
    ]
    if draw(st.booleans()):
        fields.insert(0, draw(SECONDS_FIELD))
    return " ".join(fields)


CRONS = st.one_of(st.sampled_from(CURATED_CRONS), st.sampled_from(NICKNAMES), generated_cron())

_UNITS = (("d", 86_400_000_000), ("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("us", 1))


@st.composite
def duration_text(draw: st.DrawFn, low_us: int, high_us: int) -> str | int:
    """A duration in [low, high] microseconds as a schedules file writes it: `NNus`, a sum of units
    from largest to smallest, or (when whole) a number of seconds."""
    micros = draw(
        st.one_of(
            st.sampled_from([low_us, high_us, low_us + 1, high_us - 1]),
            st.integers(low_us, high_us),
            st.sampled_from([7_000_000, 13 * 60_000_000, 3_600_000_001, 86_400_000_000 * 730]).filter(
                lambda m: low_us <= m <= high_us
            ),
        )
    )
    form = draw(st.sampled_from(["units", "us", "seconds"]))
    if form == "seconds" and micros % 1_000_000 == 0:
        return micros // 1_000_000
    if form == "us":
        return f"{micros}us"
    parts = []
    rest = micros
    for unit, size in _UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


MAX_US = HORIZON // US
EVERY = duration_text(1_000_000, MAX_US)
DURATION = duration_text(1, MAX_US)

OFFSETS = ("Z", "+00:00", "+05:45", "-12:00", "+14:00", "+12:45", "-03:30", "")


@st.composite
def start_at_text(draw: st.DrawFn) -> str:
    """An ISO-8601 start_at from near 1970 to near 3000; naive ones are read in the zone."""
    edge = draw(
        st.sampled_from(
            [
                datetime(1970, 1, 1),
                datetime(1970, 1, 1, 14),
                datetime(1970, 1, 2),
                datetime(2001, 1, 1),
                datetime(2011, 12, 30, 12),
                datetime(2026, 3, 8, 2, 30),
                datetime(2026, 11, 1, 1, 30),
                datetime(2999, 12, 31),
                datetime(2999, 12, 31, 23, 59, 59, 999999),
                datetime(3000, 1, 1),
            ]
        )
    )
    wall = draw(st.one_of(st.just(edge), st.datetimes(datetime(1970, 1, 1), datetime(3000, 1, 1))))
    return wall.isoformat() + draw(st.sampled_from(OFFSETS))


# Dates of a calendar: the edges of the accepted years, the daylight-saving days of the zones
# above, a day a zone skipped, and dates near the instants the planning is run at.
CALENDAR_DATES = (
    date(1970, 1, 1),
    date(1970, 1, 2),
    date(2011, 12, 30),
    date(2026, 3, 8),
    date(2026, 3, 29),
    date(2026, 10, 25),
    date(2026, 11, 1),
    date(2026, 12, 25),
    date(2999, 12, 31),
)


def calendar_date(near: tuple[date, ...]) -> st.SearchStrategy[date]:
    """A date of a calendar: an edge, any date, or (mostly) one within a year of one of `near`."""
    edges = st.one_of(st.sampled_from(CALENDAR_DATES), st.dates(date(1970, 1, 1), date(2999, 12, 31)))
    if not near:
        return edges
    offset = st.one_of(st.just(0), st.just(-1), st.integers(-2, 1), st.integers(-400, 400))
    close = st.tuples(st.sampled_from(near), offset).map(
        lambda t: min(max(t[0] + timedelta(days=t[1]), date(1970, 1, 1)), date(2999, 12, 31))
    )
    return st.one_of(edges, close, close, close)


@st.composite
def exclude_items(draw: st.DrawFn, near: tuple[date, ...] = ()) -> str | date:
    """One `exclude` entry: a date (text or TOML date) or a range, from a day to centuries long."""
    first = draw(calendar_date(near))
    form = draw(st.sampled_from(["text", "date", "range", "long range"]))
    if form == "date":
        return first
    if form == "text":
        return first.isoformat()
    days = draw(st.integers(0, 40)) if form == "range" else draw(st.integers(0, 400_000))
    last = min(first + timedelta(days=min(days, (date(2999, 12, 31) - first).days)), date(2999, 12, 31))
    return f"{first.isoformat()}..{last.isoformat()}"


@st.composite
def until_values(draw: st.DrawFn, near: tuple[date, ...] = ()) -> str | date:
    """An `until`: a date (text or TOML date), or a date-time naive or with an offset."""
    day = draw(calendar_date(near))
    form = draw(st.sampled_from(["text", "date", "date-time"]))
    if form == "date":
        return day
    if form == "text":
        return day.isoformat()
    return f"{day.isoformat()}T{draw(st.integers(0, 23)):02d}:30:00" + draw(st.sampled_from(OFFSETS))


@st.composite
def entries(draw: st.DrawFn, spread: bool = False) -> dict[str, Any]:
    """A [[schedule]] table as a file holds it (not all accepted); with a `spread` when asked (a
    draw of its own, after the others: the examples without it stay those they were)."""
    entry: dict[str, Any] = {"name": "s", "job": "noop"}
    if draw(st.booleans()):
        entry["every"] = draw(EVERY)
    else:
        entry["cron"] = draw(CRONS)
    entry["timezone"] = draw(st.sampled_from(ZONES))
    optional: dict[str, st.SearchStrategy[Any]] = {
        "start_at": start_at_text(),
        "catchup": st.sampled_from(["skip", "latest", "all"]),
        "max_catchup": st.one_of(st.sampled_from([1, 2, 1000, 99_999, 100_000]), st.integers(1, 100_000)),
        "grace": DURATION,
        "max_lateness": DURATION,
        "dst_repeated": st.sampled_from(["first", "last"]),
        "dst_missing": st.sampled_from(["shift", "skip"]),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            entry[key] = draw(strategy)
    if spread:
        entry["spread"] = draw(st.one_of(st.sampled_from(["0s", "1ms", "30s", "59s", "1h"]), DURATION))
    return entry


@st.composite
def calendar_fields(draw: st.DrawFn, *near: datetime) -> dict[str, Any]:
    """`exclude`, `until` or both (not all accepted), their dates mostly within a year of one of
    `near`. Drawn apart from `entries()`, so that the properties without a calendar keep the
    examples they always had."""
    day = tuple(at.date() for at in near)
    fields: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        fields["exclude"] = draw(st.lists(exclude_items(day), min_size=1, max_size=6))
    if "exclude" not in fields or not draw(st.integers(0, 2)):
        fields["until"] = draw(until_values(day))
    return fields


def with_calendar(data: st.DataObject, applied_at: datetime, later: timedelta) -> dict[str, Any]:
    """An accepted entry, with a calendar whose dates lie mostly near its first slot and near the
    instant it is planned at (`later` after that slot)."""
    entry = data.draw(entries())
    s = store(accepted_spec(entry), applied_at)
    return {**entry, **data.draw(calendar_fields(s.next_run_at, s.next_run_at + later))}


APPLIED = st.one_of(
    st.datetimes(datetime(2020, 1, 1), datetime(2040, 1, 1), timezones=st.just(UTC)),
    st.datetimes(datetime(1970, 1, 2), datetime(2990, 1, 1), timezones=st.just(UTC)),
)
LATER = st.one_of(
    st.sampled_from([timedelta(0), US, SECOND, 59 * SECOND, MINUTE, timedelta(hours=1), DAY, 30 * DAY]),
    st.sampled_from([YEAR, 10 * YEAR, 30 * YEAR, 56 * YEAR, 60 * YEAR]),
    st.integers(0, (60 * YEAR) // US).map(lambda n: n * US),
)


def accepted(entry: dict[str, Any]) -> ScheduleSpec | None:
    spec, _ = parse_entry(entry, "schedule 's'")
    return spec


def accepted_spec(entry: dict[str, Any]) -> ScheduleSpec:
    """The spec of an entry apply accepts; the others are assumed away."""
    spec = accepted(entry)
    assume(spec is not None)
    assert spec is not None
    return spec


def timed(fn: Callable[[], T], what: str) -> T:
    """fn(), failing when it costs more than CALL_BUDGET_S of CPU."""
    started = time.process_time()
    result = fn()
    spent = time.process_time() - started
    assert spent < CALL_BUDGET_S * slowness(), f"{what} took {spent:.2f} s of CPU"
    return result


@dataclass(frozen=True)
class Stored:
    """A schedule as apply stores it, and the instant it was applied."""

    spec: ScheduleSpec
    applied_at: datetime
    next_run_at: datetime


def store(spec: ScheduleSpec, applied_at: datetime) -> Stored:
    """What apply stores for `spec` at `applied_at`; assume() away what apply refuses as never firing
    (no slot in the ten years after max(now, start_at)), and what it would store with no first slot."""
    t = spec.timing
    since = applied_at if spec.start_at is None else max(applied_at, spec.start_at)

    def upcoming_slot() -> datetime | None:
        try:
            return first_slot_at_or_after(t, since)
        except TimingError:  # apply refuses it, as it does a timing with no slot
            return None

    upcoming = timed(upcoming_slot, "first_slot_at_or_after (never-fires check)")
    assume(upcoming is not None and upcoming - since <= HORIZON)
    cal = spec.calendar
    if cal is not None and not (cal.until is not None and cal.ended(since)):
        # apply's check of the calendar: a slot it lets run within the ten years (or an `until` past)
        open_slot = timed(
            lambda: first_open_slot(t, cal, since, saturating_add(since, HORIZON)),
            "first_open_slot (never-fires check)",
        )
        assume(open_slot is not None)
    first = timed(
        lambda: first_slot_at_or_after(t, spec.start_at if spec.start_at is not None else applied_at),
        "first_slot_at_or_after (next_run_at)",
    )
    assert first is not None  # a slot at or after a later instant exists
    return Stored(spec, applied_at, first)


def plan(s: Stored, next_run_at: datetime, now: datetime) -> Plan | None:
    """The plan of one tick; None when it raises TimingError for a timing that has no slot left
    to plan (the ticker marks it broken: allowed for a schedule that truly stopped firing)."""
    spec = s.spec
    try:
        return timed(
            lambda: plan_slots(
                spec.timing,
                spec.catchup,
                next_run_at,
                now,
                grace=spec.grace,
                max_lateness=spec.max_lateness,
                limit=LIMIT,
                max_catchup=spec.max_catchup,
                lookahead=LOOKAHEAD,
                offset=spec.spread_offset(),
                calendar=spec.calendar,
            ),
            "plan_slots",
        )
    except TimingError:
        # Allowed only when there is nothing left to plan: no slot from next_run_at on.
        if timed(lambda: next_slot(spec.timing, now), "next_slot") is not None:
            raise
        left = timed(lambda: slots_between(spec.timing, next_run_at, now, 1), "slots_between")
        assert not left, f"TimingError with slot {left[0].isoformat()} still to plan"
        return None
    except Exception as e:
        raise AssertionError(f"plan_slots raised {type(e).__name__}: {e}") from e


def is_slot(t: Timing, slot: datetime) -> bool:
    if t.every is not None:
        anchor = EPOCH if t.anchor is None else t.anchor
        return (slot - anchor) % t.every == timedelta(0)
    return first_slot_at_or_after(t, slot) == slot


def grace_at(s: Stored, now: datetime) -> timedelta:
    """The grace the plan uses: the schedule's, or min(60 s, the interval at now / 2)."""
    if s.spec.grace is not None:
        return s.spec.grace
    try:
        return default_grace(nominal_interval(s.spec.timing, now))
    except Exception:  # noqa: BLE001 - planning reports its own error; the bound of the default holds
        return timedelta(seconds=60)


def check_plan(s: Stored, next_run_at: datetime, now: datetime, p: Plan) -> list[datetime]:
    """The properties of one call; returns its slots (run and skipped), ascending."""
    t, spec = s.spec.timing, s.spec
    slots = sorted([*p.run, *(slot for slot, _ in p.skipped)])
    assert len(slots) <= LIMIT, f"{len(slots)} slots in one call, limit {LIMIT}"
    assert all(a < b for a, b in zip(slots, slots[1:], strict=False)), "slots not strictly increasing"
    assert all(slot >= next_run_at for slot in slots), "a slot before next_run_at"
    assert all(slot <= now + LOOKAHEAD for slot in slots), "a slot beyond now + lookahead"
    due = [slot for slot in slots if slot <= now]
    assert len(due) <= spec.max_catchup, f"{len(due)} due slots in one call, max_catchup {spec.max_catchup}"
    offset = spec.spread_offset()
    assert timedelta(0) <= offset and (spec.spread is None or offset < spec.spread), f"spread offset {offset}"
    # lateness counts from a slot's start: the slot plus the spread offset
    late = saturating_add(now, -(offset + grace_at(s, now)))
    if spec.catchup == "skip":
        assert all(slot >= late for slot in slots), f"skip created a slot older than now - grace ({late})"
    if spec.catchup == "latest":
        missed = [slot for slot in slots if slot < late]
        assert len(missed) <= 1, f"latest created {len(missed)} missed slots"
    for slot in slots[:3] + slots[-3:]:
        assert is_slot(t, slot), f"{slot} is not a slot of the timing"
    if p.next_run_at is not None and slots:
        assert p.next_run_at > slots[-1], "next_run_at not after every planned slot"
    if p.collapsed is not None:
        # the slots folded into the first slot planned: real slots between next_run_at and it
        assert spec.catchup != "skip" and slots, "slots folded in without a run to stand for them"
        c = p.collapsed
        assert c.count >= 1 and next_run_at <= c.first <= c.last < slots[0], f"collapsed {c}"
        assert is_slot(t, c.first) and is_slot(t, c.last), f"collapsed {c} not slots of the timing"
    cal = spec.calendar
    if cal is None:
        assert not p.ended and all(not why.startswith("calendar:") for _, why in p.skipped)
    else:
        # nothing runs on an excluded date or after `until`; each excluded slot says so
        assert all(cal.excluded(slot) is None and not cal.ended(slot) for slot in p.run), (
            "a slot runs excluded"
        )
        assert all(not cal.ended(slot) for slot in slots), "a slot after until"
        for slot, reason in p.skipped:
            excluded = cal.excluded(slot)
            assert excluded is None or reason == cal.reason(excluded), (
                f"{slot} excluded, skipped for {reason}"
            )
        assert not p.ended or p.next_run_at is None, "ended with a next slot"
    ahead = [slot for slot in p.run if slot > now]
    if ahead:
        # Created ahead with a grace; if nobody starts them, the policy settles them within bounds.
        assert p.ahead_grace is not None and p.ahead_grace > timedelta(0), (
            "slots created ahead without a grace"
        )
        stale = [
            StaleRun(slot, saturating_add(slot, offset + p.ahead_grace), saturating_add(slot, offset))
            for slot in ahead
        ]
        later = saturating_add(stale[-1].start_by, timedelta(microseconds=1))
        why = settle_stale(
            spec.catchup, stale, 0, later, max_lateness=spec.max_lateness, max_catchup=spec.max_catchup
        )
        kept = sum(1 for w in why if w is None)
        assert kept <= {"skip": 0, "latest": 1, "all": spec.max_catchup}[spec.catchup], (
            f"{kept} stale runs kept"
        )
    return slots


# ---------------------------------------------------------------------------------------------------
# Planning keeps its bounds over the whole accepted space


# Far ends found to flood the table: a ten-year grace, a cadence dense at other times of year.
LONG_GRACE: dict[str, Any] = {
    "entry": {
        "name": "s",
        "job": "noop",
        "every": "1s",
        "catchup": "skip",
        "grace": "3660d",
        "max_catchup": 10,
    },
    "applied_at": datetime(2026, 1, 1, tzinfo=UTC),
    "later": 10 * DAY,
}
DENSE_IN_AUTUMN: dict[str, Any] = {
    "entry": {"name": "s", "job": "noop", "cron": "* * * 9-10 *", "catchup": "all", "max_catchup": 10},
    "applied_at": datetime(2026, 12, 1, tzinfo=UTC),
    "later": 300 * DAY,
}


@PLANNING
@given(entry=entries(), applied_at=APPLIED, later=LATER)
@example(
    entry={"name": "s", "job": "noop", "cron": "0 0 29 2 *", "catchup": "all", "start_at": "2001-01-01"},
    applied_at=datetime(2026, 12, 4, tzinfo=UTC),
    later=26 * YEAR,
)
@example(
    entry={"name": "s", "job": "noop", "cron": "* * * * * *", "catchup": "all", "max_catchup": 1},
    applied_at=datetime(2020, 1, 1, tzinfo=UTC),
    later=SECOND,
)
@example(
    entry={"name": "s", "job": "noop", "cron": "* */2 * * * *", "max_catchup": 1},
    applied_at=datetime(2020, 1, 1, tzinfo=UTC),
    later=59 * SECOND,
)
@example(
    entry={"name": "s", "job": "noop", "every": "1s", "max_catchup": 1, "grace": "3660d"},
    applied_at=datetime(2020, 1, 1, tzinfo=UTC),
    later=SECOND,
)
@example(
    entry={"name": "s", "job": "noop", "cron": "59 59 23 L 12 *", "catchup": "all", "max_catchup": 99999},
    applied_at=datetime(2020, 1, 1, tzinfo=UTC),
    later=timedelta(0),
)
@example(
    entry={"name": "s", "job": "noop", "every": "3660d", "catchup": "all"},
    applied_at=datetime(2026, 1, 1, tzinfo=UTC),
    later=DAY,
)
@example(**LONG_GRACE)
@example(**DENSE_IN_AUTUMN)
@example(
    entry={
        "name": "s",
        "job": "noop",
        "cron": "* 2 * 3 0#2",
        "timezone": "America/New_York",
        "dst_missing": "skip",
        "start_at": "2001-01-01",
    },
    applied_at=datetime(2001, 1, 1, tzinfo=UTC),
    later=25 * YEAR,
)
def test_one_tick_keeps_the_bounds(entry: dict[str, Any], applied_at: datetime, later: timedelta) -> None:
    spec = accepted_spec(entry)
    s = store(spec, applied_at)
    now = s.next_run_at + later
    note(f"next_run_at={s.next_run_at.isoformat()} now={now.isoformat()}")
    p = plan(s, s.next_run_at, now)
    if p is not None:
        check_plan(s, s.next_run_at, now, p)


@PROPERTY
@given(entry=entries(spread=True), applied_at=APPLIED, later=LATER)
@example(
    entry={"name": "s", "job": "noop", "every": "1m", "catchup": "skip", "spread": "59.999999s"},
    applied_at=datetime(2026, 1, 1, tzinfo=UTC),
    later=timedelta(seconds=61),
)
@example(
    entry={"name": "s", "job": "noop", "cron": "0 * * * *", "spread": "3660d", "max_lateness": "1us"},
    applied_at=datetime(2026, 1, 1, tzinfo=UTC),
    later=10 * YEAR,
)
@example(
    entry={"name": "s", "job": "noop", "every": "3660d", "spread": "3659d", "catchup": "all"},
    applied_at=datetime(2990, 1, 1, tzinfo=UTC),
    later=timedelta(0),
)
def test_a_spread_schedule_keeps_the_bounds(
    entry: dict[str, Any], applied_at: datetime, later: timedelta
) -> None:
    # Whatever spread the file accepts (a cron's is bounded by apply, not here: any is planned),
    # the offset is within it and a tick keeps every bound, lateness counted from slot + offset.
    spec = accepted_spec(entry)
    s = store(spec, applied_at)
    now = s.next_run_at + later
    note(f"next_run_at={s.next_run_at.isoformat()} now={now.isoformat()} offset={spec.spread_offset()}")
    p = plan(s, s.next_run_at, now)
    if p is not None:
        check_plan(s, s.next_run_at, now, p)


# A tick that hits the limit ticks again at once; at one instant the whole loop keeps the bounds too.
LOOP_CALLS = 12


def ticks_at(s: Stored, now: datetime) -> tuple[list[datetime], int, datetime | None]:
    """Ticks at one instant `now`, each checked (check_plan), until nothing is left to plan within
    the lookahead or LOOP_CALLS ticks: the slots created, in order and each once, the ticks taken,
    and the next slot left to plan (none once the calendar's `until` ended the schedule)."""
    nxt: datetime | None = s.next_run_at
    created: list[datetime] = []
    calls = 0
    while nxt is not None and nxt <= now + LOOKAHEAD and calls < LOOP_CALLS:
        p = plan(s, nxt, now)
        if p is None:
            break
        slots = check_plan(s, nxt, now, p)
        assert not created or not slots or slots[0] > created[-1], "a slot planned twice"
        created += slots
        calls += 1
        if p.ended:
            # no slot after `until` is left to plan: the schedule is never due again
            assert s.spec.calendar is not None and p.next_run_at is None
            return created, calls, None
        if p.next_run_at is None or not slots and p.next_run_at == nxt:
            break
        nxt = p.next_run_at
    return created, calls, nxt


@PLANNING
@given(entry=entries(), applied_at=APPLIED, later=LATER)
@example(**LONG_GRACE)
@example(**DENSE_IN_AUTUMN)
def test_the_ticks_at_one_instant_keep_the_bounds_together(
    entry: dict[str, Any], applied_at: datetime, later: timedelta
) -> None:
    spec = accepted_spec(entry)
    s = store(spec, applied_at)
    now = s.next_run_at + later
    created, calls, nxt = ticks_at(s, now)
    due = [slot for slot in created if slot <= now]
    assert len(due) <= spec.max_catchup, (
        f"{len(due)} due slots in {calls} ticks, max_catchup {spec.max_catchup}"
    )
    late = saturating_add(now, -(spec.spread_offset() + grace_at(s, now)))
    if spec.catchup == "latest":
        assert sum(1 for slot in created if slot < late) <= 1, "latest created several missed slots"
    if spec.max_catchup + 60 * 60 <= (LOOP_CALLS - 2) * LIMIT:
        # everything due, and ahead within the lookahead, fits in these calls
        assert nxt is None or nxt > now or calls < LOOP_CALLS, f"still due after {calls} ticks"


def one_tick_with_a_calendar(entry: dict[str, Any], applied_at: datetime, later: timedelta) -> Plan | None:
    """The same bounds as without a calendar, and: nothing runs on an excluded date or after
    `until`, each excluded slot says so, and a plan that ended has no next slot (check_plan)."""
    spec = accepted_spec(entry)
    s = store(spec, applied_at)
    now = s.next_run_at + later
    p = plan(s, s.next_run_at, now)
    if p is not None:
        check_plan(s, s.next_run_at, now, p)
    return p


@PROPERTY
@given(applied_at=APPLIED, later=LATER, data=st.data())
def test_one_tick_with_a_calendar_keeps_the_bounds(
    applied_at: datetime, later: timedelta, data: st.DataObject
) -> None:
    p = one_tick_with_a_calendar(with_calendar(data, applied_at, later), applied_at, later)
    if p is not None:
        # what the examples reach (--hypothesis-show-statistics)
        event("ended" if p.ended else "not ended")
        event(
            "an excluded slot skipped"
            if any(w.startswith("calendar:") for _, w in p.skipped)
            else "none excluded"
        )


# Calendars at their edges: (entry, applied_at, later, whether the tick ends it, slots it excludes).
CALENDAR_EDGES: list[tuple[dict[str, Any], datetime, timedelta, bool, int]] = [
    # ten centuries excluded but for the first hour, and an until at the end of them
    (
        {
            "name": "s",
            "job": "noop",
            "every": "1h",
            "exclude": ["2026-01-01..2999-12-30"],
            "until": "2999-12-31",
        },
        datetime(2025, 12, 31, 22, tzinfo=UTC),
        2 * DAY,
        False,
        1,  # catch-up latest: of the missed slots only the newest is kept, and it is excluded
    ),
    # hourly in Berlin, both daylight-saving days excluded, ending the day after the second
    (
        {
            "name": "s",
            "job": "noop",
            "cron": "0 * * * *",
            "timezone": "Europe/Berlin",
            "exclude": [date(2026, 3, 29), "2026-10-25"],
            "until": "2026-10-26",
            "catchup": "all",
            "max_catchup": 100_000,
        },
        datetime(2026, 3, 1, tzinfo=UTC),
        300 * DAY,
        False,  # the limit (1000 slots) cuts the first tick short of the end
        23,  # 29 March: 23 hours
    ),
]


@settings(PROPERTY, max_examples=10)
@given(case=st.sampled_from(CALENDAR_EDGES))
def test_calendars_at_their_edges_keep_the_bounds(
    case: tuple[dict[str, Any], datetime, timedelta, bool, int],
) -> None:
    entry, applied_at, later, ended, excluded = case
    p = one_tick_with_a_calendar(entry, applied_at, later)
    assert p is not None and p.ended == ended
    assert sum(1 for _, w in p.skipped if w.startswith("calendar:")) == excluded


@PROPERTY
@given(applied_at=APPLIED, later=LATER, data=st.data())
def test_the_ticks_at_one_instant_with_a_calendar_keep_the_bounds_together(
    applied_at: datetime, later: timedelta, data: st.DataObject
) -> None:
    spec = accepted_spec(with_calendar(data, applied_at, later))
    s = store(spec, applied_at)
    now = s.next_run_at + later
    created, _, _ = ticks_at(s, now)
    assert len([slot for slot in created if slot <= now]) <= spec.max_catchup


# ---------------------------------------------------------------------------------------------------
# What apply accepts keeps firing


@PROPERTY
@given(entry=entries(), applied_at=APPLIED, fraction=st.floats(0, 1))
@example(
    entry={
        "name": "s",
        "job": "noop",
        "cron": "* 2 * 3 0#2",
        "timezone": "America/New_York",
        "dst_missing": "skip",
    },
    applied_at=datetime(2000, 6, 1, tzinfo=UTC),
    fraction=1.0,
)
def test_an_accepted_schedule_has_a_next_slot_for_ten_years(
    entry: dict[str, Any], applied_at: datetime, fraction: float
) -> None:
    # From any instant in the ten years after apply, the next slot is found at a bounded cost, or
    # the timing fails with TimingError (the ticker marks it broken) at that cost. The second
    # happens only where no slot is left for years: a zone's rules changed since (New York's
    # daylight saving moved in 2007 onto the only times of a cron accepted in 2000).
    spec = accepted_spec(entry)
    s = store(spec, applied_at)
    since = applied_at if spec.start_at is None else max(applied_at, spec.start_at)
    at = since + HORIZON * fraction

    def following_or_error() -> datetime | TimingError | None:
        try:
            return next_slot(spec.timing, at)
        except TimingError as e:
            return e

    following = timed(following_or_error, "next_slot")
    if isinstance(following, TimingError):
        assert not timed(lambda: slots_between(spec.timing, at, at + HORIZON, 1), "slots_between"), following
        return
    assert following is not None, f"no slot after {at.isoformat()}"
    assert is_slot(spec.timing, following)
    assert s.next_run_at <= following or s.next_run_at > at


# ---------------------------------------------------------------------------------------------------
# An independent enumeration of slots


def interval_slots(
    every: timedelta, anchor: datetime, a: datetime, b: datetime, limit: int
) -> list[datetime]:
    """anchor + k * every for the k with a <= slot <= b, in integer microseconds."""
    anchor = anchor.astimezone(UTC)  # aware arithmetic in a zone would be wall-clock arithmetic
    step = every // US
    k = -((anchor - a) // US // step)  # ceil((a - anchor) / every)
    out: list[datetime] = []
    while len(out) < limit:
        try:
            slot = anchor + k * step * US
        except OverflowError:
            break
        if slot > b:
            break
        if slot >= a:
            out.append(slot.astimezone(UTC))
        k += 1
    return out


@PROPERTY
@given(
    every=EVERY,
    start_at=st.one_of(st.none(), start_at_text()),
    tz=st.sampled_from(ZONES),
    at=st.one_of(APPLIED, st.datetimes(datetime(9990, 1, 1), datetime(9999, 12, 1), timezones=st.just(UTC))),
    count=st.integers(0, 40),
    jitter=st.floats(0, 1),
)
def test_interval_slots_are_anchor_plus_multiples_of_every(
    every: str | int, start_at: str | None, tz: str, at: datetime, count: int, jitter: float
) -> None:
    entry: dict[str, Any] = {"name": "s", "job": "noop", "every": every, "timezone": tz}
    if start_at is not None:
        entry["start_at"] = start_at
    spec = accepted_spec(entry)
    assert spec.timing.every is not None
    step = spec.timing.every
    anchor = spec.start_at if spec.start_at is not None else EPOCH
    try:
        end = at + step * count + step * jitter
    except OverflowError:
        end = datetime.max.replace(tzinfo=UTC)
    expected = interval_slots(step, anchor, at, end, 50)
    assert timed(lambda: slots_between(spec.timing, at, end, 50), "slots_between") == expected
    following = interval_slots(step, anchor, at + US, datetime.max.replace(tzinfo=UTC), 1)
    assert next_slot(spec.timing, at) == (following[0] if following else None)
    preceding = interval_slots(step, anchor, at - step, at, 2)
    assert latest_slot_at_or_before(spec.timing, at) == (preceding[-1] if preceding else None)


@dataclass(frozen=True)
class CronSets:
    """A cron expression's fields with cron's meaning, for matching one wall time."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int | str]
    months: frozenset[int]
    weekdays: frozenset[int | str]
    days_star: bool  # the day-of-month field starts with *
    weekdays_star: bool  # the day-of-week field starts with *

    @property
    def cadence(self) -> bool:
        return len(self.hours) == 24


NICKNAME_FIELDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def cron_sets(expr: str) -> CronSets:
    parsed = parse_cron(expr)
    fields = NICKNAME_FIELDS.get(expr.strip().lower(), expr).split()
    if len(fields) == 5:
        fields.insert(0, "0")
    return CronSets(
        parsed.seconds,
        parsed.minutes,
        parsed.hours,
        parsed.days,
        parsed.months,
        parsed.weekdays,
        days_star=fields[3].startswith("*"),
        weekdays_star=fields[5].startswith("*"),
    )


def _dom_matches(days: frozenset[int | str], d: date) -> bool:
    last = calendar.monthrange(d.year, d.month)[1]
    if d.day in days:
        return True
    if "L" in days and d.day == last:
        return True
    if "LW" in days:
        last_weekday = last
        while date(d.year, d.month, last_weekday).weekday() >= 5:
            last_weekday -= 1
        if d.day == last_weekday:
            return True
    return False


def _dow_matches(weekdays: frozenset[int | str], d: date) -> bool:
    dow = (d.weekday() + 1) % 7  # cron: 0 is Sunday
    if dow in weekdays:
        return True
    last = calendar.monthrange(d.year, d.month)[1]
    if f"{dow}L" in weekdays and d.day + 7 > last:
        return True
    return f"{dow}#{(d.day - 1) // 7 + 1}" in weekdays


@lru_cache(maxsize=1 << 16)
def _day_matches(c: CronSets, d: date) -> bool:
    if d.month not in c.months:
        return False
    if c.days_star or c.weekdays_star:
        return _dom_matches(c.days, d) and _dow_matches(c.weekdays, d)
    return _dom_matches(c.days, d) or _dow_matches(c.weekdays, d)


def wall_matches(c: CronSets, wall: datetime) -> bool:
    return (
        wall.second in c.seconds
        and wall.minute in c.minutes
        and wall.hour in c.hours
        and _day_matches(c, wall.date())
    )


def cron_slots(
    c: CronSets, tz: ZoneInfo, a: datetime, b: datetime, step: timedelta, repeated: str, missing: str
) -> list[datetime]:
    """The slots in [a, b], found by walking the UTC time line in `step`s (a minute, or a second
    for a seconds field) and reading each instant's wall time in `tz`, by the DST rules of
    fleet.timing.schedule: a cadence expression fires at every instant whose wall time matches; a
    wall-clock one at one occurrence of a repeated wall time, and a matching wall time in a gap
    becomes the instant the gap ends (shift) or nothing (skip)."""
    out: list[datetime] = []
    instant = a - step
    prev_wall = instant.astimezone(tz).replace(tzinfo=None)
    instant += step
    while instant <= b:
        local = instant.astimezone(tz)
        wall = local.replace(tzinfo=None)
        hit = False
        if wall_matches(c, wall):
            if c.cadence:
                hit = True
            else:
                first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
                last = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
                hit = first == last or (instant == (first if repeated == "first" else last))
        if not hit and not c.cadence and missing == "shift" and wall - prev_wall > step:
            # wall times the clock jumped over: each matching one is shifted to this instant
            skipped = prev_wall + step
            while skipped < wall and not hit:
                hit = wall_matches(c, skipped)
                skipped += step
        if hit:
            out.append(instant)
        prev_wall = wall
        instant += step
    return out


def transitions(tz: ZoneInfo, year: int) -> list[datetime]:
    """The instants of `year` at which `tz`'s offset changes (to the minute)."""
    found = []
    at = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    while at < end:
        nxt = at + DAY
        if at.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            lo, hi = at, nxt
            while hi - lo > MINUTE:
                mid = lo + (hi - lo) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid <= lo:
                    mid = lo + MINUTE
                if mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset():
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
        at = nxt
    return found


def compare_with_oracle(
    expr: str, tz_name: str, repeated: str, missing: str, a: datetime, span: timedelta
) -> None:
    entry = {
        "name": "s",
        "job": "noop",
        "cron": expr,
        "timezone": tz_name,
        "dst_repeated": repeated,
        "dst_missing": missing,
    }
    spec = accepted_spec(entry)
    c = cron_sets(expr)
    six = len(NICKNAME_FIELDS.get(expr.strip().lower(), expr).split()) == 6
    step = SECOND if six else MINUTE
    if six:
        span = min(span, timedelta(hours=3))
    a = a.replace(second=0, microsecond=0)
    b = a + span
    expected = cron_slots(c, ZoneInfo(tz_name), a, b, step, repeated, missing)
    got = timed(lambda: slots_between(spec.timing, a, b, 20_000), "slots_between")
    note(f"window {a.isoformat()} .. {b.isoformat()}")
    missing_slots = sorted(set(expected) - set(got))[:5]
    extra_slots = sorted(set(got) - set(expected))[:5]
    assert got == expected, f"fleet lacks {missing_slots}, has extra {extra_slots}"


DST_RULES = st.tuples(st.sampled_from(["first", "last"]), st.sampled_from(["shift", "skip"]))
WINDOW_CRONS = st.one_of(st.sampled_from(CURATED_CRONS), generated_cron())


@PROPERTY
@given(
    expr=WINDOW_CRONS,
    tz=st.sampled_from(FIXED_ZONES),
    rules=DST_RULES,
    at=st.datetimes(datetime(1987, 1, 1), datetime(2999, 1, 1), timezones=st.just(UTC)),
    near_slot=st.booleans(),
    lead=st.integers(0, 24 * 60),
)
def test_cron_slots_in_fixed_zones_match_an_enumeration(
    expr: str, tz: str, rules: tuple[str, str], at: datetime, near_slot: bool, lead: int
) -> None:
    if near_slot:
        # a window around a slot fleet names: sparse expressions are compared where they fire
        with_rules = Timing(cron=expr, timezone=tz) if _accepts(expr, tz) else None
        assume(with_rules is not None)
        assert with_rules is not None
        found = timed(lambda: first_slot_at_or_after(with_rules, at), "first_slot_at_or_after")
        assume(found is not None and found.year < 9999)
        assert found is not None
        at = found - lead * MINUTE
    compare_with_oracle(expr, tz, *rules, at, timedelta(days=2))


def _accepts(expr: str, tz: str) -> bool:
    return accepted({"name": "s", "job": "noop", "cron": expr, "timezone": tz}) is not None


@PROPERTY
@given(
    expr=WINDOW_CRONS,
    tz=st.sampled_from(DST_ZONES),
    rules=DST_RULES,
    year=st.one_of(st.sampled_from([2011, 2026]), st.integers(1971, 2037)),
    which=st.integers(0, 3),
    lead=st.integers(0, 36 * 60),
)
@example(expr="0 0 30 12 *", tz="Pacific/Apia", rules=("first", "shift"), year=2011, which=1, lead=60)
@example(expr="30 2 * * *", tz="America/New_York", rules=("first", "skip"), year=2026, which=0, lead=600)
@example(expr="* 2 * 3 0#2", tz="America/New_York", rules=("first", "skip"), year=2011, which=0, lead=0)
@example(expr="* 2 8-14 3 0", tz="America/New_York", rules=("last", "skip"), year=2026, which=0, lead=600)
@example(expr="0,30 * * * *", tz="Australia/Lord_Howe", rules=("last", "shift"), year=2026, which=0, lead=120)
def test_cron_slots_around_a_dst_change_match_an_enumeration(
    expr: str, tz: str, rules: tuple[str, str], year: int, which: int, lead: int
) -> None:
    changes = transitions(ZoneInfo(tz), year)
    assume(changes)
    change = changes[which % len(changes)]
    compare_with_oracle(expr, tz, *rules, change - lead * MINUTE, timedelta(days=2))


def test_the_oracle_sees_the_dst_rules_of_the_docstring() -> None:
    """The enumeration itself, on cases the schedule docstring spells out."""
    ny = ZoneInfo("America/New_York")
    spring = datetime(2026, 3, 8, 7, tzinfo=UTC)  # 02:00 EST -> 03:00 EDT
    c = cron_sets("30 2 * * *")
    a, b = spring - DAY, spring + DAY
    assert cron_slots(c, ny, a, b, MINUTE, "first", "shift") == [
        datetime(2026, 3, 7, 7, 30, tzinfo=UTC),
        spring,
        datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
    ]
    assert cron_slots(c, ny, a, b, MINUTE, "first", "skip") == [
        datetime(2026, 3, 7, 7, 30, tzinfo=UTC),
        datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
    ]
    autumn = datetime(2026, 11, 1, 6, tzinfo=UTC)  # 02:00 EDT -> 01:00 EST
    c = cron_sets("30 1 * * *")
    first = cron_slots(c, ny, autumn - DAY, autumn + DAY, MINUTE, "first", "shift")
    last = cron_slots(c, ny, autumn - DAY, autumn + DAY, MINUTE, "last", "shift")
    assert autumn - 30 * MINUTE in first and autumn + 30 * MINUTE not in first
    assert autumn + 30 * MINUTE in last and autumn - 30 * MINUTE not in last
    hourly = cron_slots(
        cron_sets("0 * * * *"),
        ny,
        autumn - 3 * 60 * MINUTE,
        autumn + 3 * 60 * MINUTE,
        MINUTE,
        "first",
        "shift",
    )
    assert len(hourly) == 7  # every real hour, the repeated one twice
    assert cron_sets("* 2 8-14 3 0").days_star is False
    assert _day_matches(cron_sets("0 0 * 2 1#5"), date(2044, 2, 29))  # a fifth Monday of February
    assert _day_matches(cron_sets("0 0 LW * *"), date(2026, 1, 30))  # 31 January 2026 is a Saturday
    assert transitions(ZoneInfo("Pacific/Apia"), 2011)[-1] == datetime(2011, 12, 30, 10, tzinfo=UTC)
