"""What fleetctl's commands name (schedules, slots, instants, durations): read from the command
line, checked against the database, and written back in the same notation."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from fleet.errors import UsageError
from fleet.health.reading import why_no_run
from fleet.store.queries import q

_BARE_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def parse_instant(text: str, flag: str) -> datetime:
    """An ISO-8601 instant such as ``2026-11-02T10:00:00Z``; without an offset it is read as UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except ValueError:
        raise UsageError(f"{flag}: not an ISO-8601 time: {text!r} (e.g. 2026-11-02T10:00:00Z)") from None
    except OverflowError:  # its offset moves it out of years 1 to 9999 in UTC
        raise UsageError(f"{flag}: out of range in UTC (years 1 to 9999): {text!r}") from None


def parse_span(text: str, flag: str) -> timedelta:
    """A duration in the schedules file's notation (``30s``, ``7d``, ``1h30m``)."""
    from fleet.timing.schedule import TimingError, parse_duration

    try:
        return parse_duration(text, flag)
    except TimingError as e:
        raise UsageError(str(e)) from None


def parse_age(text: str, flag: str, longest: timedelta) -> timedelta:
    """A duration with its unit (``7d``, ``12h``, ``90s``): a bare number is refused rather than read
    as seconds, and so is anything longer than `longest`."""
    bare = text.strip()
    if _BARE_NUMBER.fullmatch(bare):
        raise UsageError(
            f"{flag}: give a unit, e.g. 7d, 12h or 30m (a bare number is not read as seconds): {text!r}"
        )
    span = parse_span(text, flag)
    if span > longest:
        raise UsageError(f"{flag}: at most {longest.days}d, got {text!r}")
    return span


def parse_count(text: str, flag: str, low: int = 1, high: int = 10_000) -> int:
    """A whole number from `low` to `high` given to `flag`; UsageError naming the flag otherwise."""
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise UsageError(f"{flag}: not a whole number: {text!r}") from None
    if not low <= value <= high:
        raise UsageError(f"{flag}: must be from {low} to {high}, got {value}")
    return value


def iso(value: datetime | None) -> str | None:
    """An instant as UTC ISO-8601 with a ``Z``, the way slots are named everywhere."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def require_schedules(conn: psycopg.Connection[Any], names: list[str]) -> None:
    """Raise UsageError naming every schedule in `names` that does not exist."""
    if not names:
        return
    found = {r["name"] for r in conn.execute(q("schedule_names"), {"names": names})}
    missing = [n for n in dict.fromkeys(names) if n not in found]
    if missing:
        raise UsageError(f"no such schedule: {', '.join(repr(n) for n in missing)}")


def schedule_row(conn: psycopg.Connection[Any], name: str, now: datetime | None = None) -> dict[str, Any]:
    """The schedule's row plus the database's `db_now`; UsageError when there is none."""
    row: dict[str, Any] | None = conn.execute(q("schedule_get"), {"name": name, "now": now}).fetchone()
    if row is None:
        raise UsageError(f"no such schedule: {name!r}")
    return row


def run_row(conn: psycopg.Connection[Any], name: str, slot: datetime) -> dict[str, Any]:
    """The run of `name` at `slot`; UsageError naming both when the schedule or the run is unknown."""
    row: dict[str, Any] | None = conn.execute(q("run_get"), {"name": name, "slot": slot}).fetchone()
    if row is None:
        raise UsageError(
            f"schedule {name!r} has no run at {iso(slot)}{why_no_run(conn, schedule_row(conn, name), slot)}"
        )
    return row
