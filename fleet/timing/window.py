"""The window a run covers: the schedule's previous successful slot and what that run returned, and
the slots the catch-up policy folded into this run. What a handler reads as `ctx.window`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

# The largest result a handler may return, in bytes of JSON: a cursor, a watermark, a few counts.
# State larger than that belongs in the application's own tables.
MAX_RESULT_BYTES: Final = 8 * 1024


@dataclass(frozen=True, slots=True)
class Collapsed:
    """Slots the catch-up policy dropped (or skipped) in favour of this run: how many, the first and
    the last. They all lie between the window's `previous_slot` and the run's own slot."""

    count: int
    first: datetime
    last: datetime


@dataclass(frozen=True, slots=True)
class Window:
    """What this run covers: the slots after `previous_slot`, up to and including its own.

    `previous_slot` is the schedule's newest successful slot before this one (None for the first
    run ever, or when the runs before it were all removed), and `previous_result` what that run's
    handler returned (None when it returned nothing). `collapsed` names the slots catch-up folded
    into this run (under `catchup = "latest"`, or those `max_catchup` dropped under `all`); None
    when there were none. The window is read by the run's first attempt and is the same for every
    later attempt (retries, a run retaken after a crash, an operator's retry).
    """

    previous_slot: datetime | None = None
    previous_result: Any = None
    collapsed: Collapsed | None = None

    @property
    def first_run(self) -> bool:
        """True when no successful run of the schedule precedes this one."""
        return self.previous_slot is None


NO_WINDOW: Final = Window()


def window_of(stored: dict[str, Any] | None) -> Window:
    """The window from a run's `run_window` column (the empty one, shared, when there is none):
    `previous_slot` and `previous_result` as its first claim found them, `collapsed`,
    `collapsed_first` and `collapsed_last` as the catch-up policy recorded them. What cannot be
    read (a value written by hand) is left out rather than failing the attempt."""
    if not stored:
        return NO_WINDOW
    folded = None
    count, first, last = (
        stored.get("collapsed"),
        _instant(stored, "collapsed_first"),
        _instant(stored, "collapsed_last"),
    )
    if isinstance(count, int) and not isinstance(count, bool) and first is not None and last is not None:
        folded = Collapsed(count, first, last)
    return Window(_instant(stored, "previous_slot"), stored.get("previous_result"), folded)


def window_text(window: Window) -> str:
    """The window as JSON, as a command job reads it from FLEET_WINDOW: `previous_slot` (ISO-8601
    UTC or null), `previous_result`, and `collapsed` (null, or `count`, `first` and `last`)."""
    c = window.collapsed
    return orjson.dumps(
        {
            "previous_slot": _iso(window.previous_slot),
            "previous_result": window.previous_result,
            "collapsed": None
            if c is None
            else {"count": c.count, "first": _iso(c.first), "last": _iso(c.last)},
        }
    ).decode()


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def window_json(collapsed: Collapsed | None) -> str | None:
    """The `run_window` a run is created (or settled) with: the slots folded into it, if any."""
    if collapsed is None:
        return None
    return orjson.dumps(
        {
            "collapsed": collapsed.count,
            "collapsed_first": collapsed.first.astimezone(UTC).isoformat(),
            "collapsed_last": collapsed.last.astimezone(UTC).isoformat(),
        }
    ).decode()


def _instant(stored: dict[str, Any], key: str) -> datetime | None:
    value = stored.get(key)
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at.astimezone(UTC) if at.tzinfo is not None else None


def result_json(value: Any, max_bytes: int = MAX_RESULT_BYTES) -> tuple[bytes | None, str | None]:
    """A handler's return value as the JSON its run stores, or why it cannot be stored: a line
    starting with `result: `. None is no result. JSON values only (objects with string keys,
    arrays, strings, finite numbers, booleans, null; a tuple is an array), at most `max_bytes`
    bytes, with no NUL character (PostgreSQL's jsonb cannot store one)."""
    if value is None:
        return None, None
    try:
        encoded = orjson.dumps(
            value,
            option=orjson.OPT_PASSTHROUGH_DATETIME
            | orjson.OPT_PASSTHROUGH_DATACLASS
            | orjson.OPT_PASSTHROUGH_SUBCLASS,
        )
    except TypeError as e:  # orjson.JSONEncodeError: a type JSON cannot hold, or nested too deep
        return None, f"result: the handler returned a value that is not JSON ({e})"
    bad = _not_plain(value)
    if bad:
        return None, f"result: the handler returned a value that is not JSON ({bad})"
    if len(encoded) > max_bytes:
        return None, (
            f"result: {len(encoded):,} bytes of JSON, more than the {max_bytes:,} a run may store"
            " (return a cursor or a summary; keep larger state in your own tables)"
        )
    return encoded, None


def _not_plain(value: Any) -> str | None:
    """What orjson writes but would not read back the same: a float that is not finite (written
    as null), a NUL character, a value of another type than JSON's (a UUID, an enum). The walk
    goes only as deep as orjson accepted."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a finite number"
    if isinstance(value, str):
        return "a string holds a NUL character (\\u0000)" if "\x00" in value else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _not_plain(k) or _not_plain(v)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for v in value:
            found = _not_plain(v)
            if found:
                return found
        return None
    if value is None or isinstance(value, int | bool):
        return None
    # what orjson writes as something else (a UUID as a string, an enum as its value)
    return f"a {type(value).__name__} is not a JSON value"
