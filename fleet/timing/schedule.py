"""Schedule arithmetic: at which instants does a schedule fire?

Pure functions over timezone-aware datetimes; nothing here reads the clock or touches the database.
A schedule (:class:`Timing`) is either an interval, with slots at ``anchor + k * every`` for every
integer ``k``, or a cron expression evaluated on the wall clock of an IANA time zone.

Cron expressions are read with cron's meaning (:mod:`fleet.timing.cron`), matched against local wall-clock
time, and each matching wall time is then placed on the UTC time line. Daylight saving time makes
some wall times occur twice (fall-back) and others not at all (spring-forward); how those are placed
depends on the set of hours the expression covers, not on how it is spelt:

* Cadence expressions cover all 24 hours (``0 * * * *``, ``*/15 * * * *``, ``0 */1 * * *``,
  ``0 0-23 * * *``). Their pattern repeats every hour of real time, so every instant whose local wall
  time matches is a slot: a wall time that occurs twice gives two slots, one that does not exist gives
  none. ``0 * * * *`` therefore fires every 60 real minutes straight through a one-hour change.
* Wall-clock expressions cover fewer hours (``30 2 * * *``, ``0 */2 * * *``, ``0 9-17 * * 1-5``).
  They name times of day, and each matching wall time gives at most one slot: a repeated one at its
  first or last occurrence (``Timing.dst_repeated``), a missing one at the first instant after the
  gap or not at all (``Timing.dst_missing``).

Every slot is a UTC instant, produced once, and the slots of a schedule are strictly increasing.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from fleet.timing.cron import CronError
from fleet.timing.cron import parse as parse_cron

__all__ = [
    "Timing",
    "TimingError",
    "DROPPED_COUNT_LIMIT",
    "describe",
    "first_slot_at_or_after",
    "latest_slot_at_or_before",
    "count_slots",
    "newest_slots_from",
    "next_slot",
    "nominal_interval",
    "saturating_add",
    "cadence_run",
    "cadence_slots",
    "parse_duration",
    "slot_offsets",
    "slots_and_next",
    "slots_between",
    "validate_timing",
    "zone",
]

Repeated = Literal["first", "last"]
Missing = Literal["shift", "skip"]

_MICROSECOND: Final = timedelta(microseconds=1)
_SECOND: Final = timedelta(seconds=1)
_EARLIEST: Final = datetime.min.replace(tzinfo=UTC)
_LATEST: Final = datetime.max.replace(tzinfo=UTC)
# A cron walk gives up after this many matching wall times in a row that yield no slot (each falls
# in a daylight-saving gap under dst_missing = "skip", or shifts onto a slot already given): a
# timing that fires only inside gaps would otherwise be walked to year 9999 at every evaluation.
# Each gap costs one wall time, however many of the expression's times it holds, so a timing that
# fires at all meets far fewer in a row (one per gap between two of its slots).
IDLE_CANDIDATES: Final = 200
# How many slots dropped by a catch-up are counted: only for the operator's information.
DROPPED_COUNT_LIMIT: Final = 10_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_CRON_LENGTH: Final = 200
_MAX_DURATION_LENGTH: Final = 100
_MAX_ZONE_LENGTH: Final = 64

# Start of the probe that refuses expressions cronsim parses but that can never fire. The Gregorian
# calendar repeats every 400 years and every satisfiable day pattern recurs well within cronsim's
# 50-year search horizon, so one probe from any fixed date suffices.
_PROBE_START: Final = datetime(2000, 1, 1)

_DURATION_UNITS: Final = {
    "w": 7 * 86_400_000_000,
    "d": 86_400_000_000,
    "h": 3_600_000_000,
    "m": 60_000_000,
    "s": 1_000_000,
    "ms": 1_000,
    "us": 1,
}
_DURATION_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|us|[wdhms])")
_DURATION: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|us|[wdhms])\s*)+")
_BARE_NUMBER: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")

_ZONE_NAME: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
# Present in some zoneinfo directories but not zones: one mirrors the host's setting, one is a
# template for POSIX TZ strings.
_NOT_ZONES: Final = frozenset({"localtime", "posixrules"})

# A cadence expression fires at every instant whose wall time matches. The first reading of each
# wall time plus the last reading covers both occurrences of a repeated wall time, and a wall time
# inside a gap has no instant at all.
_CADENCE_RULES: Final[tuple[tuple[Repeated, Missing], ...]] = (("first", "skip"), ("last", "skip"))


class TimingError(ValueError):
    """A schedule's timing is invalid.

    ``str(e)`` is a one-line message starting with the offending field, e.g.
    ``'cron: never fires ("0 0 30 2 *")'`` or ``'every: must be positive'``.
    """


@dataclass(frozen=True, slots=True)
class Timing:
    """When a job fires: exactly one of ``every`` and ``cron`` is set.

    every: interval schedule; slots are ``anchor + k * every`` for every integer ``k``.
    cron: cron expression with 5 fields, or 6 with seconds first; also ``L``, ``LW``, ``5L``, ``#``
        and the nicknames ``@yearly @annually @monthly @weekly @daily @midnight @hourly``
        (the dialect is :mod:`fleet.timing.cron`'s).
    timezone: IANA zone name; cron expressions are evaluated on its wall clock.
    anchor: aware datetime that interval slots are aligned to; ``None`` means the Unix epoch, so
        ``every=5m`` lands on :00, :05, ... Not used by cron schedules.
    dst_repeated: for wall-clock cron expressions (fewer than 24 hours), which occurrence of a wall
        time that occurs twice at fall-back is the slot.
    dst_missing: for wall-clock cron expressions, whether a wall time that does not exist at
        spring-forward is shifted to the first instant after the gap or skipped that day.
    """

    every: timedelta | None = None
    cron: str | None = None
    timezone: str = "UTC"
    anchor: datetime | None = None
    dst_repeated: Repeated = "first"
    dst_missing: Missing = "shift"


# ---------------------------------------------------------------------------------------------------
# Parsing and validation


def parse_duration(value: str | int | float, field: str) -> timedelta:
    """Parse a duration such as ``"500ms"``, ``"30s"``, ``"5m"``, ``"1h30m"``, ``"1h 30m"``, ``"2d"``
    or ``"1w"``; a number (or a string holding only a number) is seconds.

    Units are ``w d h m s ms us``, each used at most once and from largest to smallest; numbers may
    have a fractional part. Zero is returned as is. Raises :class:`TimingError` with a message
    starting with ``f"{field}: "`` for anything else, negative values, values finer than a
    microsecond and values too large for a timedelta.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TimingError(f"{field}: expected a duration such as '30s' or a number of seconds")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise TimingError(f"{field}: not a finite number of seconds ({value!r})")
        if value < 0:
            raise TimingError(f"{field}: must not be negative ({value!r})")
        try:
            return timedelta(seconds=value)
        except OverflowError:
            raise TimingError(f"{field}: too large ({value!r})") from None

    text = value.strip()
    shown = _quote(value)
    if len(text) > _MAX_DURATION_LENGTH:
        raise TimingError(f"{field}: duration too long ({len(text)} characters)")
    if text.startswith("-"):
        raise TimingError(f"{field}: must not be negative ({shown})")
    if _BARE_NUMBER.fullmatch(text):
        micros = Fraction(text) * _DURATION_UNITS["s"]
    elif _DURATION.fullmatch(text):
        micros = Fraction(0)
        previous_unit: int | None = None
        for number, unit in _DURATION_PART.findall(text):
            size = _DURATION_UNITS[unit]
            if previous_unit is not None and size >= previous_unit:
                raise TimingError(
                    f"{field}: units must go from largest to smallest, each at most once ({shown})"
                )
            previous_unit = size
            micros += Fraction(number) * size
    else:
        raise TimingError(f"{field}: invalid duration {shown} (expected e.g. '30s', '5m', '1h30m', '500ms')")
    if micros.denominator != 1:
        raise TimingError(f"{field}: finer than a microsecond ({shown})")
    try:
        return timedelta(microseconds=int(micros))
    except OverflowError:
        raise TimingError(f"{field}: too large ({shown})") from None


def zone(name: str) -> ZoneInfo:
    """Return the IANA time zone called `name`.

    Raises ``TimingError("timezone: unknown time zone '<name>'")`` for names that are not zones,
    including the empty string, paths, and files of the zone database that are not zones.
    """
    if not isinstance(name, str):
        raise TimingError("timezone: must be a string")
    if len(name) > _MAX_ZONE_LENGTH or not _ZONE_NAME.fullmatch(name) or name in _NOT_ZONES:
        raise TimingError(f"timezone: unknown time zone {_quote(name)}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise TimingError(f"timezone: unknown time zone {_quote(name)}") from None


def validate_timing(t: Timing) -> None:
    """Raise :class:`TimingError` unless `t` describes a schedule that fires.

    The message starts with the field at fault: ``cron/every`` when not exactly one of them is set,
    then ``every``, ``cron``, ``timezone``, ``anchor``, ``dst_repeated`` or ``dst_missing``.
    Cron expressions are refused when :func:`fleet.timing.cron.parse` refuses them (strictly: lenient
    forms that earlier versions accepted are refused here, though stored schedules using them keep
    being evaluated), when they can never fire, and when they are longer than 200 characters.
    """
    _build(t, strict=True)


# ---------------------------------------------------------------------------------------------------
# Slot queries


def next_slot(t: Timing, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, in UTC; ``None`` if there is none.

    Walking ``next_slot`` from slot to slot visits exactly the slots :func:`slots_between` returns.
    Raises :class:`TimingError` if `t` is invalid and ``ValueError`` if `after` is naive.
    """
    return next(_plan(t).after(_utc(after, "after")), None)


def first_slot_at_or_after(t: Timing, at: datetime) -> datetime | None:
    """The first slot at or after `at`, in UTC; ``None`` if there is none."""
    moment = _utc(at, "at")
    return next(_plan(t).after(moment - _MICROSECOND), None) if moment > _EARLIEST else None


def latest_slot_at_or_before(t: Timing, at: datetime) -> datetime | None:
    """The last slot at or before `at`, in UTC; ``None`` if there is none.

    For cron schedules the search reaches back 50 years at most.
    """
    return _plan(t).latest(_utc(at, "at"))


def newest_slots_from(t: Timing, start: datetime, end: datetime, count: int) -> tuple[datetime, int]:
    """Where the newest `count` slots in ``[start, end]`` begin, and how many slots of that range
    come before them: ``(start, 0)`` when the range holds at most `count` slots.

    Interval schedules are counted exactly, at no cost in their number of slots. Cron schedules are
    counted a day at a time (:func:`slot_offsets`) back from `end`, and the slots before the newest
    `count` are counted up to :data:`DROPPED_COUNT_LIMIT` from `start`.
    """
    if count < 1:
        raise ValueError("count must be positive")
    first, last = _utc(start, "start"), _utc(end, "end")
    if first > last:
        return first, 0
    plan = _plan(t)
    if isinstance(plan, _IntervalPlan):
        high = plan._index(last)
        total = high - plan._index_before(first)
        if total <= count:
            return first, 0
        begin = plan._slot(high - count + 1)
        return (first, 0) if begin is None else (begin, total - count)
    # Slots are whole seconds apart at least: a range shorter than `count` seconds fits.
    if (last - first) // _SECOND + 1 <= count:
        return first, 0
    if not _counted_by_day(plan.expr):
        return _newest_walked(t, plan, first, last, count)
    # Back from `end` a stretch at a time, each twice as long as the one after it, counted a day at
    # a time (slot_offsets): the cost goes with the days the newest `count` slots span, not with
    # their number (a catch-up of 100,000 one-second slots spans a day and a bit).
    need, upper, width = count, last, _DAY
    while upper >= first:
        low = max(first, saturating_add(upper, -width))
        chunks = list(slot_offsets(t, low, upper))
        for base, offsets in reversed(chunks):
            if len(offsets) < need:
                need -= len(offsets)
                continue
            newest = base + timedelta(microseconds=offsets[len(offsets) - need])
            dropped = count_slots(t, first, newest - _MICROSECOND, DROPPED_COUNT_LIMIT)
            return (newest, dropped) if dropped else (first, 0)
        if low == first:
            break
        upper, width = low - _MICROSECOND, width * 2
    return first, 0


def _newest_walked(
    t: Timing, plan: _CronPlan, first: datetime, last: datetime, count: int
) -> tuple[datetime, int]:
    """newest_slots_from slot by slot: back from `last` at most ``count + 1`` slots."""
    newest: datetime | None = None
    for n, slot in enumerate(plan.before(last, first), start=1):
        if slot < first:
            return first, 0
        if n == count:
            newest = slot
        elif n > count:
            assert newest is not None
            return newest, count_slots(t, first, newest - _MICROSECOND, DROPPED_COUNT_LIMIT)
    return first, 0


# A matching day costs slot_offsets about as much as walking 16 slots (12 times a day: 1.5 s walked
# against 2.0 s by the day for a catch-up of 100,000 slots; 24 times: 3.7 s against 0.9 s): a cron
# with at most this many times a day is counted slot by slot.
_WALKED_TIMES_A_DAY = 16


@functools.lru_cache(maxsize=1024)
def _counted_by_day(expr: str) -> bool:
    """Whether a cron expression's long ranges are counted faster a day at a time than walked."""
    return len(_day_parts(expr)[0]) > _WALKED_TIMES_A_DAY


def count_slots(t: Timing, start: datetime, end: datetime, limit: int) -> int:
    """How many slots ``[start, end]`` holds, counted up to `limit` (``len(slots_between(...))``,
    counted a day at a time, or walked for a cron of few times a day)."""
    plan = _plan(t)
    if not isinstance(plan, _IntervalPlan) and not _counted_by_day(plan.expr):
        return len(slots_between(t, start, end, limit))
    counted = 0
    for _, offsets in slot_offsets(t, start, end):
        counted += len(offsets)
        if counted >= limit:
            return limit
    return counted


def saturating_add(at: datetime, delta: timedelta) -> datetime:
    """``at + delta``, held at the first or last representable instant instead of overflowing."""
    try:
        return at + delta
    except OverflowError:
        return _LATEST if delta > timedelta(0) else _EARLIEST


def slots_between(t: Timing, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """The slots ``s`` with ``start <= s <= end``, ascending, in UTC, at most `limit` of them."""
    if limit < 0:
        raise ValueError("limit must not be negative")
    first, last = _utc(start, "start"), _utc(end, "end")
    slots: list[datetime] = []
    if limit == 0 or first > last:
        return slots
    for slot in _plan(t).after(first - _MICROSECOND, last):
        if slot > last:
            break
        slots.append(slot)
        if len(slots) == limit:
            break
    return slots


def slots_and_next(
    t: Timing, start: datetime, end: datetime, limit: int
) -> tuple[list[datetime], datetime | None]:
    """What :func:`slots_between` returns, and the first slot after the last of them (``None`` when
    there is none, or when no slot was returned), in one walk of the schedule."""
    if limit < 0:
        raise ValueError("limit must not be negative")
    first, last = _utc(start, "start"), _utc(end, "end")
    slots: list[datetime] = []
    if limit == 0 or first > last:
        return slots, None
    walk = _plan(t).after(first - _MICROSECOND)
    for slot in walk:
        if slot > last:
            return slots, slot if slots else None
        slots.append(slot)
        if len(slots) == limit:
            break
    return slots, next(walk, None) if slots else None


def nominal_interval(t: Timing, at: datetime) -> timedelta:
    """The schedule's own cadence near `at`.

    That is ``every`` for interval schedules; for cron, the gap between the slot at or before `at`
    and the slot after it (or between the first two slots after `at` when none precedes it). Near a
    daylight saving transition this is the real gap, e.g. 23 hours for a daily job on the day the
    clocks spring forward.
    """
    plan = _plan(t)
    if isinstance(plan, _IntervalPlan):
        return plan.every
    moment = _utc(at, "at")
    previous = plan.latest(moment)
    slots = plan.after(moment if previous is None else previous - _MICROSECOND)
    first, second = next(slots, None), next(slots, None)
    if first is None or second is None:
        raise TimingError(f'cron: does not fire twice around {_iso(moment)} ("{t.cron}")')
    return second - first


def cadence_slots(t: Timing, at: datetime) -> tuple[datetime, datetime, datetime] | None:
    """Three consecutive slots ``a <= at < b < c``: `nominal_interval` is ``b - a`` for any instant
    in ``[a, b)`` and ``c - b`` for any in ``[b, c)``, so they can be stored and looked up instead of
    evaluated per read. None when no slot precedes `at` or fewer than two follow it."""
    run = cadence_run(t, at, 0)
    return None if run is None else (run[0], run[2], run[3])


def cadence_run(t: Timing, at: datetime, limit: int) -> tuple[datetime, timedelta, datetime, datetime] | None:
    """Slots ``a <= at < m < c`` and `gap` such that the slots from ``a`` to ``m`` are `gap` apart:
    `nominal_interval` is `gap` for any instant in ``[a, m)`` and ``c - m`` for any in ``[m, c)``.
    ``m`` is the end of that run of equal gaps, or `limit` slots past the first slot after ``a``,
    whichever comes first (with `limit` 0, the next slot after ``a``: :func:`cadence_slots`).
    None when no slot precedes `at` or fewer than two follow it."""
    plan = _plan(t)
    moment = _utc(at, "at")
    previous = plan.latest(moment)
    if previous is None:
        return None
    walk = plan.after(previous - _MICROSECOND)
    a, m, c = next(walk, None), next(walk, None), next(walk, None)
    if a is None or m is None or c is None:
        return None
    gap = m - a
    for _ in range(limit):
        if c - m != gap:
            break
        following = next(walk, None)
        if following is None:
            break
        m, c = c, following
    return a, gap, m, c


def timing_of(row: Mapping[str, Any]) -> Timing:
    """The Timing a `schedules` row describes (columns every, cron, timezone, start_at, dst_*)."""
    return Timing(
        every=row["every"],
        cron=row["cron"],
        timezone=row["timezone"],
        anchor=row["start_at"],
        dst_repeated=row["dst_repeated"],
        dst_missing=row["dst_missing"],
    )


def describe(t: Timing) -> str:
    """Short human-readable text, e.g. ``"every 5m"`` or ``"cron 0 2 * * * (Europe/Berlin)"``.

    Never raises, even for an invalid `t`.
    """
    if isinstance(t.cron, str):
        text = " ".join(t.cron.split())
        if len(text) > _MAX_CRON_LENGTH:
            text = text[:_MAX_CRON_LENGTH] + "..."
        details = [str(t.timezone)]
        if t.dst_repeated != "first":
            details.append(f"repeated times: {t.dst_repeated}")
        if t.dst_missing != "shift":
            details.append(f"missing times: {t.dst_missing}")
        return f"cron {text} ({', '.join(details)})"
    if isinstance(t.every, timedelta):
        text = f"every {format_duration(t.every)}"
        if isinstance(t.anchor, datetime) and t.anchor.utcoffset() is not None:
            text += f" from {_iso(t.anchor)}"
        return text
    return "no schedule"


# ---------------------------------------------------------------------------------------------------
# Compiled schedules


@dataclass(frozen=True)
class _IntervalPlan:
    every: timedelta
    anchor: datetime  # UTC

    def _index(self, at: datetime) -> int:
        """The largest k with anchor + k * every <= at."""
        return ((at - self.anchor) // _MICROSECOND) // (self.every // _MICROSECOND)

    def _index_before(self, at: datetime) -> int:
        """The largest k with anchor + k * every < at."""
        return ((at - self.anchor) // _MICROSECOND - 1) // (self.every // _MICROSECOND)

    def _slot(self, index: int) -> datetime | None:
        try:
            return self.anchor + index * self.every
        except OverflowError:
            return None

    def after(self, at: datetime, until: datetime = _LATEST) -> Iterator[datetime]:
        """Slots strictly after `at`, ascending (`until` is for the cron walk's sake)."""
        index = self._index(at) + 1
        while (slot := self._slot(index)) is not None:
            yield slot
            index += 1

    def latest(self, at: datetime) -> datetime | None:
        """The last slot at or before `at`."""
        return self._slot(self._index(at))

    def before(self, at: datetime, since: datetime = _EARLIEST) -> Iterator[datetime]:
        """Slots at or before `at`, descending (`since` is for the cron walk's sake)."""
        index = self._index(at)
        while (slot := self._slot(index)) is not None:
            yield slot
            index -= 1


@dataclass(frozen=True)
class _CronPlan:
    expr: str  # six fields, in forms cronsim reads as cron does (fleet.timing.cron.parse)
    tz: ZoneInfo
    # How matching wall times become instants: one rule for wall-clock expressions, both readings
    # of repeated wall times for cadence expressions.
    rules: tuple[tuple[Repeated, Missing], ...]

    def after(self, at: datetime, until: datetime = _LATEST) -> Iterator[datetime]:
        """Slots strictly after `at`, strictly ascending. The walk may end at the first slot after
        `until` (the caller looks no further): matching times that give no slot past it are not
        walked, so that a bounded range costs its own times, not a search for the next slot."""
        if len(self.rules) == 2 and _once(self.tz, at):
            yield from self._after_once(at, until)
            return
        yield from self._merged(at, until)

    def _merged(self, at: datetime, until: datetime = _LATEST) -> Iterator[datetime]:
        floor = at
        for slot in heapq.merge(*(self._after(at, until, *rule) for rule in self.rules)):
            if slot > floor:
                yield slot
                floor = slot

    def _after_once(self, at: datetime, until: datetime) -> Iterator[datetime]:
        """`after` for a cadence expression (both readings of repeated wall times), in one walk of
        the wall clock while the matching wall times occur once: both rules place such a wall time
        on the same instant and skip one inside a gap, so merging two walks would only see every
        slot twice. At the first repeated wall time the two walks take over from the last slot."""
        start = at.astimezone(self.tz).replace(tzinfo=None, fold=0)
        floor = at
        idle = _Idle(self, at)
        try:
            while True:
                for candidate in CronSim(self.expr, start):
                    first, last = _instants(self.tz, candidate)
                    if min(first, last) > until:
                        return
                    if first > last:
                        # inside a gap: skipped under both rules, and so is the rest of the gap
                        idle.count()
                        start = _gap_end_wall(self.tz, first, last) - _SECOND
                        break
                    if first < last:
                        yield from self._merged(floor, until)
                        return
                    if first > floor:
                        yield first
                        floor = first
                        idle.reset()
                    else:
                        idle.count()
                else:
                    return
        except OverflowError:
            return

    def latest(self, at: datetime) -> datetime | None:
        """The last slot at or before `at`."""
        if len(self.rules) == 2 and _once(self.tz, at):
            # While `at` and the latest slot under the first reading occur once, no repeated wall
            # time between them has a second reading at or before `at` that is later.
            slot = self._latest(at, *self.rules[0])
            if slot is not None and _once(self.tz, slot):
                return slot
        found = [slot for rule in self.rules if (slot := self._latest(at, *rule)) is not None]
        return max(found, default=None)

    def before(self, at: datetime, since: datetime = _EARLIEST) -> Iterator[datetime]:
        """Slots at or before `at`, strictly descending; the walk may end at the first slot before
        `since` (as `after` does at `until`)."""
        ceiling: datetime | None = None
        walks = (self._before(at, *rule, since=since) for rule in self.rules)
        for slot in heapq.merge(*walks, reverse=True):
            if ceiling is None or slot < ceiling:
                yield slot
                ceiling = slot

    # cronsim is handed naive local wall-clock time, so it only does calendar arithmetic; placing
    # wall times on the UTC time line is done here, by _place. Under one rule _place never
    # decreases as the wall time increases, which is what lets both walks below stop at the
    # first fitting wall time.

    def _after(
        self, at: datetime, until: datetime, repeated: Repeated, missing: Missing
    ) -> Iterator[datetime]:
        local = at.astimezone(self.tz)
        wall = local.replace(tzinfo=None, fold=0)
        start = wall  # cronsim yields wall times strictly after this
        first, last = _instants(self.tz, wall)
        if first < last:
            span_start, span_end = _repeated_span(self.tz, wall, first, last)
            if repeated == "first" and local.fold == 1:
                # The repeated stretch was placed at its first pass, which is over by now.
                start = span_end - _MICROSECOND
            elif repeated == "last" and local.fold == 0:
                # The whole repeated stretch is placed at its second pass, still ahead.
                start = span_start - _MICROSECOND
        floor = at
        idle = _Idle(self, at)
        try:
            while True:
                for candidate in CronSim(self.expr, start):
                    first, last = _instants(self.tz, candidate)
                    if min(first, last) > until:
                        return
                    slot = _place(self.tz, first, last, repeated, missing)
                    # Several wall times in a gap may shift onto the same instant.
                    if slot is not None and slot > floor:
                        yield slot
                        floor = slot
                        idle.reset()
                    else:
                        idle.count()
                    if first > last:
                        # The rest of the gap gives no other slot: walk on from its end.
                        start = _gap_end_wall(self.tz, first, last) - _SECOND
                        break
                else:
                    return
        except OverflowError:
            return

    def _latest(self, at: datetime, repeated: Repeated, missing: Missing) -> datetime | None:
        return next(self._before(at, repeated, missing), None)

    def _before(
        self, at: datetime, repeated: Repeated, missing: Missing, since: datetime = _EARLIEST
    ) -> Iterator[datetime]:
        """Slots at or before `at` under one rule, strictly descending."""
        local = at.astimezone(self.tz)
        wall = local.replace(tzinfo=None, fold=0)
        end = wall + _MICROSECOND  # cronsim yields wall times strictly before this
        first, last = _instants(self.tz, wall)
        if first < last:
            span_start, span_end = _repeated_span(self.tz, wall, first, last)
            if repeated == "first" and local.fold == 1:
                end = span_end
            elif repeated == "last" and local.fold == 0:
                end = span_start
        ceiling = saturating_add(at, _MICROSECOND)
        idle = _Idle(self, at)
        try:
            while True:
                for candidate in CronSim(self.expr, end, reverse=True):
                    first, last = _instants(self.tz, candidate)
                    if max(first, last) < since:
                        return
                    slot = _place(self.tz, first, last, repeated, missing)
                    if slot is not None and slot < ceiling:
                        yield slot
                        ceiling = slot
                        idle.reset()
                    else:
                        idle.count()
                    if first > last:
                        # The rest of the gap gives no other slot: walk on from its start.
                        end = _gap_start_wall(self.tz, first, last)
                        break
                else:
                    return
        except OverflowError:
            return


@lru_cache(maxsize=4096)
def _plan(t: Timing) -> _IntervalPlan | _CronPlan:
    # Stored schedules are evaluated leniently: an expression an earlier version accepted keeps
    # its slots rather than stopping the ticker; validate_timing refuses it for new files.
    return _build(t, strict=False)


def _build(t: Timing, *, strict: bool) -> _IntervalPlan | _CronPlan:
    if t.every is None and t.cron is None:
        raise TimingError("cron/every: one of them must be set")
    if t.every is not None and t.cron is not None:
        raise TimingError("cron/every: only one of them may be set")
    if t.every is not None:
        if not isinstance(t.every, timedelta):
            raise TimingError("every: must be a timedelta")
        if t.every <= timedelta(0):
            raise TimingError("every: must be positive")
    fields, cadence = _parse_cron(t.cron, strict) if t.cron is not None else ("", True)
    tz = zone(t.timezone)
    if t.anchor is not None and (not isinstance(t.anchor, datetime) or t.anchor.utcoffset() is None):
        raise TimingError("anchor: must be a timezone-aware datetime")
    if t.dst_repeated not in ("first", "last"):
        raise TimingError(f"dst_repeated: must be 'first' or 'last', not {_quote(t.dst_repeated)}")
    if t.dst_missing not in ("shift", "skip"):
        raise TimingError(f"dst_missing: must be 'shift' or 'skip', not {_quote(t.dst_missing)}")

    if t.every is not None:
        anchor = _EPOCH if t.anchor is None else t.anchor.astimezone(UTC)
        return _IntervalPlan(every=t.every, anchor=anchor)
    rules = _CADENCE_RULES if cadence else ((t.dst_repeated, t.dst_missing),)
    return _CronPlan(expr=fields, tz=tz, rules=rules)


# A file of many schedules repeats its expressions (a million hourly ones have at most 3,600 among
# them); parsing and probing one costs about as much as the rest of validating its schedule.
@lru_cache(maxsize=4096)
def _parse_cron(cron: str, strict: bool) -> tuple[str, bool]:
    """Return the expression as cronsim is to evaluate it, and whether it is a cadence: whether
    its hours are all 24, so that its pattern repeats every hour of real time."""
    if not isinstance(cron, str):
        raise TimingError("cron: must be a string")
    if len(cron) > _MAX_CRON_LENGTH:
        raise TimingError(f"cron: expression too long ({len(cron)} characters, at most {_MAX_CRON_LENGTH})")
    text = " ".join(cron.split())
    if not text:
        raise TimingError("cron: empty expression")
    if not all(c in " \t" or (c.isascii() and c.isprintable()) for c in cron):
        text = cron.strip().encode("unicode_escape").decode("ascii")
    try:
        parsed = parse_cron(cron, strict=strict)
    except CronError as e:
        raise TimingError(f'cron: {e} ("{text}")') from None
    try:
        next(CronSim(parsed.expr, _PROBE_START))
    except (CronSimError, StopIteration):
        # cronsim refuses a day of month that no listed month has (30 February) when the day
        # of week does not widen it; the fields are fine on their own, so the expression never fires.
        raise TimingError(f'cron: never fires ("{text}")') from None
    return parsed.expr, len(parsed.hours) == 24


# ---------------------------------------------------------------------------------------------------
# Wall clock and UTC


def _instants(tz: ZoneInfo, wall: datetime) -> tuple[datetime, datetime]:
    """The UTC instants of naive local `wall` read with fold=0 and with fold=1 (PEP 495).

    They are equal when the wall time occurs once. When it occurs twice the first is the earlier
    occurrence and the second the later one. When it falls into a gap the first lies after the gap
    and the second before it.
    """
    return (
        wall.replace(tzinfo=tz, fold=0).astimezone(UTC),
        wall.replace(tzinfo=tz, fold=1).astimezone(UTC),
    )


def _once(tz: ZoneInfo, at: datetime) -> bool:
    """Whether the wall time of instant `at` in `tz` occurs only once (is not repeated)."""
    first, last = _instants(tz, at.astimezone(tz).replace(tzinfo=None, fold=0))
    return first == last


def _transition(tz: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant in (lo, hi] whose UTC offset in `tz` differs from the offset at `lo`.

    `lo` and `hi` must straddle exactly one offset change.
    """
    offset = lo.astimezone(tz).utcoffset()
    low, high = 0, (hi - lo) // _MICROSECOND
    while high - low > 1:
        middle = (low + high) // 2
        if (lo + middle * _MICROSECOND).astimezone(tz).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return lo + high * _MICROSECOND


def _repeated_span(
    tz: ZoneInfo, wall: datetime, first: datetime, last: datetime
) -> tuple[datetime, datetime]:
    """The naive wall-clock stretch [start, end) that the clock runs through twice, given a wall
    time in it and the UTC instants of its two occurrences."""
    change = _transition(tz, first, last)
    return wall - (last - change), wall + (change - first)


def _place(
    tz: ZoneInfo, first: datetime, last: datetime, repeated: Repeated, missing: Missing
) -> datetime | None:
    """The slot for a matching wall time, given its two readings (`_instants`), under the given DST
    rule, or None if it has none."""
    if first <= last:
        return first if repeated == "first" else last
    if missing == "skip":
        return None
    # `last` is before the gap and `first` after it; the first valid instant is where it ends.
    return _transition(tz, last, first)


def _gap_end_wall(tz: ZoneInfo, first: datetime, last: datetime) -> datetime:
    """The naive wall time at which the gap holding a wall time (read as `first` and `last`) ends:
    the first wall time after it that exists."""
    return _transition(tz, last, first).astimezone(tz).replace(tzinfo=None)


def _gap_start_wall(tz: ZoneInfo, first: datetime, last: datetime) -> datetime:
    """The naive wall time at which the gap holding a wall time (read as `first` and `last`)
    starts: the first that does not exist."""
    change = _transition(tz, last, first)
    return (change - _SECOND).astimezone(tz).replace(tzinfo=None) + _SECOND


class _Idle:
    """Counts the matching wall times of a walk that gave no slot in a row, up to IDLE_CANDIDATES."""

    __slots__ = ("at", "n", "plan")

    def __init__(self, plan: _CronPlan, at: datetime) -> None:
        self.plan, self.at, self.n = plan, at, 0

    def reset(self) -> None:
        self.n = 0

    def count(self) -> None:
        self.n += 1
        if self.n > IDLE_CANDIDATES:
            raise TimingError(
                f"cron: its next {IDLE_CANDIDATES} times from {_iso(self.at)} all fall in"
                f" daylight-saving gaps of {self.plan.tz.key}"
            )


# ---------------------------------------------------------------------------------------------------
# Small helpers


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_duration(value: timedelta) -> str:
    """Format `value` in the notation :func:`parse_duration` reads, e.g. ``1h30m``."""
    micros = value // _MICROSECOND
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    parts: list[str] = []
    for unit, size in _DURATION_UNITS.items():
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)


# ---------------------------------------------------------------------------------------------------
# Long ranges of a cron schedule, a day at a time

# How densely a day's UTC offset is sampled to find that no offset change touches it. Changes in
# tzdata are hours or at least minutes apart, never two within this step that cancel out.
_OFFSET_PROBE: Final = timedelta(minutes=30)
_DAY: Final = timedelta(days=1)


def slot_offsets(t: Timing, start: datetime, end: datetime) -> Iterator[tuple[datetime, Sequence[int]]]:
    """The slots in [start, end] as ``(base, offsets)`` pairs, ascending: each slot is ``base``
    plus a number of microseconds from ``offsets`` (ascending). Exactly the slots
    :func:`slots_between` gives, at a fraction of the cost for a long range of a cron schedule.

    A cron day whose UTC offset is the same throughout (and on both of its edges) holds its wall
    times once each, at a fixed distance from its midnight, and nothing from the days beside it:
    its slots are that midnight plus the times of day the expression lists. The stretches between
    such days (the days of an offset change, and the days with no matching date) are walked."""
    first, last = _utc(start, "start"), _utc(end, "end")
    if first > last:
        return
    plan = _plan(t)
    if isinstance(plan, _IntervalPlan):
        # an interval's slots by arithmetic: its first slot in the range, then every `every`
        begin, end_slot = first_slot_at_or_after(t, first), latest_slot_at_or_before(t, last)
        if begin is not None and end_slot is not None and begin <= end_slot:
            yield begin, range(0, (end_slot - begin) // _MICROSECOND + 1, plan.every // _MICROSECOND)
        return
    times, day_expr = _day_parts(plan.expr)
    cursor = first  # the slots before it are given
    wall = first.astimezone(plan.tz).replace(tzinfo=None, fold=0)
    try:
        for day in CronSim(day_expr, datetime(wall.year, wall.month, wall.day) - _SECOND):
            base = day.replace(tzinfo=plan.tz).astimezone(UTC)
            if base > last:
                break
            if base + _DAY <= cursor or not _steady_day(plan.tz, base):
                continue
            if base > cursor:
                yield from _walked(t, cursor, base - _MICROSECOND)
            low = (max(cursor, base) - base) // _MICROSECOND
            high = (min(last, base + _DAY - _MICROSECOND) - base) // _MICROSECOND
            if low == 0 and high >= times[-1]:
                yield base, times
            else:
                yield base, times[bisect.bisect_left(times, low) : bisect.bisect_right(times, high)]
            cursor = base + _DAY
            if cursor > last:
                return
    except (OverflowError, StopIteration, CronSimError):
        pass
    yield from _walked(t, cursor, last)


def _walked(t: Timing, start: datetime, end: datetime) -> Iterator[tuple[datetime, Sequence[int]]]:
    if start > end:
        return
    slots = slots_between(t, start, end, 2**62)
    if slots:
        yield slots[0], [(s - slots[0]) // _MICROSECOND for s in slots]


def _steady_day(tz: ZoneInfo, base: datetime) -> bool:
    """Whether the UTC offset of `tz` is one and the same from just before instant `base` to
    `base` plus a day, both ends included."""
    offset = base.astimezone(tz).utcoffset()
    if (base - _MICROSECOND).astimezone(tz).utcoffset() != offset:
        return False
    probe = base + _OFFSET_PROBE
    while probe < base + _DAY:
        if probe.astimezone(tz).utcoffset() != offset:
            return False
        probe += _OFFSET_PROBE
    return (base + _DAY).astimezone(tz).utcoffset() == offset


@lru_cache(maxsize=256)
def _day_parts(expr: str) -> tuple[tuple[int, ...], str]:
    """A six-field expression's times of day (microseconds after midnight, ascending) and the
    expression of its matching dates alone (at midnight)."""
    fields = parse_cron(expr, strict=False)
    times = sorted(
        ((h * 60 + m) * 60 + s) * 1_000_000
        for h in fields.hours
        for m in fields.minutes
        for s in fields.seconds
    )
    return tuple(times), "0 0 0 " + " ".join(expr.split()[3:])
