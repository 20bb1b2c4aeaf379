"""A schedule's calendar: dates on which its slots do not run, and a date after which it has none.

Pure, like fleet.timing.schedule: nothing here reads the clock or touches the database. Dates are read on
the schedule's own wall clock: a slot is excluded when its local date (in the schedule's time zone)
falls in one of the `exclude` ranges, so a range means whole local days whatever daylight saving
does to their length. `until` ends the schedule: no slot after that date (the whole day, local) or,
given as a date-time, after that instant.

The ticker records an excluded slot as `skipped` with a reason starting ``calendar:``; it creates
no slot after `until` and then leaves the schedule without a next slot (`status` says ENDED).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson

from fleet.timing.schedule import Timing, TimingError, first_slot_at_or_after, zone

MAX_EXCLUDE: Final = 1000  # ranges in one schedule's `exclude`
EARLIEST_DATE: Final = date(1970, 1, 1)
LATEST_DATE: Final = date(2999, 12, 31)
REASON_PREFIX: Final = "calendar:"
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
_DAY: Final = timedelta(days=1)
_MICROSECOND: Final = timedelta(microseconds=1)

Range = tuple[date, date]


@dataclass(frozen=True, slots=True)
class Calendar:
    """Excluded date ranges (inclusive, as written) and the end bound, read in `timezone`."""

    exclude: tuple[Range, ...] = ()
    until: date | datetime | None = None  # a date: its whole (local) day; a datetime: aware
    timezone: str = "UTC"
    # the excluded ranges sorted and merged, and their first dates (for a bisection)
    _ranges: tuple[Range, ...] = field(default=(), init=False, repr=False, compare=False)
    _starts: tuple[date, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        merged: list[Range] = []
        for first, last in sorted(self.exclude):
            if merged and first <= merged[-1][1] + _DAY:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        object.__setattr__(self, "_ranges", tuple(merged))
        object.__setattr__(self, "_starts", tuple(r[0] for r in merged))

    @property
    def ranges(self) -> tuple[Range, ...]:
        """The excluded ranges sorted, overlapping and adjacent ones merged."""
        return self._ranges

    @property
    def tz(self) -> ZoneInfo:
        return zone(self.timezone)

    def excluded(self, slot: datetime) -> Range | None:
        """The merged range whose dates hold the slot's local date, or None."""
        starts = self._starts
        if not starts:
            return None
        day = slot.astimezone(self.tz).date()
        i = bisect.bisect_right(starts, day) - 1
        if i >= 0 and day <= self.ranges[i][1]:
            return self.ranges[i]
        return None

    def ended(self, slot: datetime) -> bool:
        """Whether `slot` comes after `until`."""
        if self.until is None:
            return False
        if isinstance(self.until, datetime):
            return slot > self.until
        return slot.astimezone(self.tz).date() > self.until

    def end(self) -> datetime | None:
        """The first instant after `until` (None without one): no slot at or after it."""
        if self.until is None:
            return None
        if isinstance(self.until, datetime):
            return self.until.astimezone(UTC) + _MICROSECOND
        return day_start(self.until + _DAY, self.tz) if self.until < LATEST_DATE else None

    def quiet_from(self, at: datetime) -> datetime | None:
        """Since when a schedule has been kept quiet by its exclusions, as of `at`: `at` itself
        while its local date is excluded, else the end of the latest excluded range before it
        (None when there is none)."""
        starts = self._starts
        day = at.astimezone(self.tz).date()
        i = bisect.bisect_right(starts, day) - 1
        if i < 0:
            return None
        if day <= self.ranges[i][1]:
            return at
        return day_start(self.ranges[i][1] + _DAY, self.tz)

    def reason(self, r: Range) -> str:
        """The reason a slot excluded by range `r` is recorded skipped with."""
        return f"{REASON_PREFIX} excluded {range_text(r)} ({self.timezone})"

    def to_json(self) -> dict[str, Any] | None:
        """What the `calendar` column holds (None for an empty calendar)."""
        if not self.exclude and self.until is None:
            return None
        out: dict[str, Any] = {}
        if self.exclude:
            out["exclude"] = [range_text(r) for r in self.exclude]
        if self.until is not None:
            out["until"] = self.until.isoformat()
        return out


def range_text(r: Range) -> str:
    """A range as the schedules file writes it: ``2026-12-25`` or ``2026-12-24..2026-12-26``."""
    return r[0].isoformat() if r[0] == r[1] else f"{r[0].isoformat()}..{r[1].isoformat()}"


def day_start(d: date, tz: ZoneInfo) -> datetime:
    """The first instant of local date `d` (midnight, or where a gap at midnight ends)."""
    return datetime.combine(d, time(0), tzinfo=tz).astimezone(UTC)


def from_row(calendar: Mapping[str, Any] | None, timezone: str) -> Calendar | None:
    """The Calendar of a `schedules` row's `calendar` column (None when it has none).

    A stored calendar that cannot be read raises TimingError naming the field (the ticker marks the
    schedule broken).
    """
    if not calendar:
        return None
    return _cached(orjson.dumps(calendar, option=orjson.OPT_SORT_KEYS), timezone)


@lru_cache(maxsize=4096)
def _cached(text: bytes, timezone: str) -> Calendar:
    problems: list[str] = []
    stored = orjson.loads(text)
    cal = parse(
        stored.get("exclude"), stored.get("until"), timezone, lambda f, m: problems.append(f"{f}: {m}")
    )
    if problems or cal is None:
        raise TimingError(problems[0] if problems else "exclude: unreadable")
    return cal


def first_open_slot(timing: Timing, cal: Calendar | None, at: datetime, horizon: datetime) -> datetime | None:
    """The first slot at or after `at`, and no later than `horizon`, that the calendar lets run;
    None when there is none. Steps over each excluded range at once (its cost is in ranges, not
    slots). Raises what the timing raises."""
    slot = first_slot_at_or_after(timing, at)
    steps = 0 if cal is None else len(cal.ranges) + 2
    while slot is not None and slot <= horizon:
        if cal is None:
            return slot
        if cal.ended(slot):
            return None
        r = cal.excluded(slot)
        if r is None:
            return slot
        steps -= 1
        if steps < 0 or r[1] >= LATEST_DATE:
            return None
        after = day_start(r[1] + _DAY, cal.tz)
        slot = first_slot_at_or_after(timing, max(after, slot + _MICROSECOND))
    return None


# ---------------------------------------------------------------------------------------------------
# The schedules file's fields


def parse(exclude: Any, until: Any, timezone: str, bad: Callable[[str, str], None]) -> Calendar | None:
    """The calendar of a schedule's `exclude` and `until` fields (None when neither is given);
    each problem is reported through `bad(field, message)`."""
    ranges: list[Range] = []
    if exclude is not None:
        if not isinstance(exclude, list | tuple):
            bad("exclude", 'must be a list of dates such as ["2026-12-25", "2026-12-24..2026-12-26"]')
        elif len(exclude) > MAX_EXCLUDE:
            bad("exclude", f"at most {MAX_EXCLUDE} dates or ranges, got {len(exclude)}")
        else:
            for i, item in enumerate(exclude):
                r, problem = _range(item)
                if problem is not None:
                    bad(f"exclude[{i}]", problem)
                elif r is not None:
                    ranges.append(r)
    end: date | datetime | None = None
    if until is not None:
        end = _until(until, timezone, bad)
    if not ranges and end is None:
        return None
    return Calendar(tuple(ranges), end, timezone)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _date(value: Any) -> tuple[date | None, str | None]:
    if isinstance(value, datetime):
        return None, f"a date such as '2026-12-25', not a date-time: {_shown(value.isoformat())}"
    if isinstance(value, date):
        d = value
    elif isinstance(value, str) and _DATE.fullmatch(value.strip()):
        try:
            d = date.fromisoformat(value.strip())
        except ValueError:
            return None, f"not a date: {_shown(value)}"
    else:
        return (
            None,
            f"expected a date such as '2026-12-25' or a range '2026-12-24..2026-12-26', got {_shown(value)}",
        )
    if not EARLIEST_DATE <= d <= LATEST_DATE:
        return None, f"a date from 1970 to 2999, got {d.isoformat()}"
    return d, None


def _range(item: Any) -> tuple[Range | None, str | None]:
    if isinstance(item, str) and ".." in item:
        left, _, right = item.partition("..")
        first, problem = _date(left)
        if problem is None:
            last, problem = _date(right)
        if problem is not None:
            return None, problem
        assert first is not None and last is not None
        if first > last:
            return None, f"the range ends before it starts: {_shown(item)}"
        return (first, last), None
    d, problem = _date(item)
    return (None, problem) if d is None else ((d, d), None)


def _until(value: Any, timezone: str, bad: Callable[[str, str], None]) -> date | datetime | None:
    """A date (the whole local day) or a date-time (no offset: in the schedule's time zone)."""
    is_date = isinstance(value, date) and not isinstance(value, datetime)
    if is_date or (isinstance(value, str) and _DATE.fullmatch(value.strip())):
        d, problem = _date(value)
        if problem is not None:
            bad("until", problem)
        return d
    if isinstance(value, str):
        text = value.strip()
        try:
            value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            bad("until", f"not an ISO-8601 date or date-time: {_shown(text)}")
            return None
    if not isinstance(value, datetime):
        bad("until", f"must be a date such as '2027-06-30' or an ISO-8601 date-time, got {_shown(value)}")
        return None
    if value.tzinfo is None:
        try:
            value = value.replace(tzinfo=zone(timezone))
        except Exception:  # noqa: BLE001 - the time zone's own field reports it
            value = value.replace(tzinfo=UTC)
    try:
        in_range = EARLIEST_DATE <= value.astimezone(UTC).date() <= LATEST_DATE
    except OverflowError:
        in_range = False
    if not in_range:
        bad("until", f"from 1970 to 2999, got {_shown(value.isoformat())}")
        return None
    end: datetime = value
    return end
