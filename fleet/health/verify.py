"""`fleetctl verify` and `fleet.Client.verify`: prove that every slot of a window ran once, or say
which did not and why.

For each schedule the slots of the window are enumerated from its timing alone (fleet.timing.schedule:
interval slots by arithmetic, cron slots by the walk), never from what the ticker recorded, and
merged with the schedule's runs (fleet.health.ledger), read in one snapshot as a stream of packed chunks.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Generator, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg.rows import tuple_row

from fleet.errors import RequestError, UnknownSchedule
from fleet.health.ledger import FAR, Facts, Ledger, ScheduleLedger, Verification, instant, micros
from fleet.store.queries import q
from fleet.timing.calendars import from_row
from fleet.timing.schedfile import MAX_GRACE, default_grace
from fleet.timing.schedule import (
    Timing,
    TimingError,
    describe,
    first_slot_at_or_after,
    latest_slot_at_or_before,
    nominal_interval,
    saturating_add,
    slot_offsets,
    timing_of,
)

DEFAULT_WINDOW: Final = timedelta(hours=24)
# The longest window a verification takes unless told otherwise: a year and a day, so that a year
# of a schedule can be proved at once (525,600 slots of a one-minute schedule), and a mistyped
# --since does not walk a decade.
DEFAULT_MAX_WINDOW: Final = timedelta(days=366)
MAX_WINDOW_LIMIT: Final = timedelta(days=3660)
# The fleet's default retention, the tickers' own (FLEET_RETENTION): slots older than a schedule's
# retention may have lost their runs to it.
DEFAULT_RETENTION: Final = timedelta(days=30)
DEFAULT_LIMIT: Final = 100  # ranges listed per schedule
MAX_LIMIT: Final = 100_000
# Slots enumerated, and runs read, per chunk (a span of the window holding about as many slots).
CHUNK: Final = 8192
_MICROSECOND: Final = timedelta(microseconds=1)
_BIG_ENDIAN: Final = sys.byteorder == "big"


def verify(
    conn: psycopg.Connection[Any],
    names: Sequence[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    now: datetime | None = None,
    retention: timedelta | None = DEFAULT_RETENTION,
    max_window: timedelta = DEFAULT_MAX_WINDOW,
    limit: int = DEFAULT_LIMIT,
    labels: dict[str, str] | None = None,
) -> Verification:
    """The ledger of the named schedules (every enabled one when none is named) over
    [since, until]: by default the 24 hours before now, and never past now.

    `retention` is the fleet's default retention (a schedule's own wins; None: runs are kept for
    ever). RequestError, naming the argument (`labels` maps since, until and max_window to the
    names the caller shows), for an unknown schedule, `since` after `until` or in the future, or a
    window longer than `max_window`.
    """
    named = list(dict.fromkeys(names or ()))
    with conn.transaction():
        conn.execute(q("ledger_begin"))
        row = conn.execute(q("ledger_session"), {"now": now}).fetchone()
        assert row is not None
        db_now: datetime = row["now"]
        start, end = window(since, until, db_now, max_window, labels or {})
        schedules = conn.execute(
            q("schedule_ledger"), {"every": not named, "names": named, "since": start}
        ).fetchall()
        missing = sorted(set(named) - {s["name"] for s in schedules})
        if missing:
            raise UnknownSchedule(missing)
        ledgers = tuple(
            schedule_ledger(conn, s, start, end, db_now, retention=retention, limit=limit) for s in schedules
        )
    return Verification(since=start, until=end, now=db_now, schedules=ledgers)


def window(
    since: datetime | None,
    until: datetime | None,
    now: datetime,
    max_window: timedelta,
    labels: dict[str, str],
) -> tuple[datetime, datetime]:
    """The window [since, until] to verify, its end no later than `now`; RequestError naming the
    argument when it is empty or longer than `max_window`."""
    name = {"since": "since", "until": "until", "max_window": "max_window", **labels}.get
    end = now if until is None or until > now else until
    start = saturating_add(end, -DEFAULT_WINDOW) if since is None else since
    if since is not None and until is not None and since > until:
        raise RequestError(f"{name('since')}: {_iso(since)} is after {name('until')} {_iso(until)}")
    if start > now:
        raise RequestError(
            f"{name('since')}: {_iso(start)} is in the future (the database's now is {_iso(now)})"
        )
    if end - start > max_window:
        raise RequestError(
            f"{name('since')}: the window from {_iso(start)} to {_iso(end)} is "
            f"{span_text(end - start)}, longer than {name('max_window')} {span_text(max_window)}"
        )
    return start, end


def schedule_ledger(
    conn: psycopg.Connection[Any],
    schedule: dict[str, Any],
    since: datetime,
    until: datetime,
    now: datetime,
    *,
    retention: timedelta | None,
    limit: int,
) -> ScheduleLedger:
    """One schedule's ledger over [since, until] (`schedule` is its schedule_ledger row). A
    calendar's `until` cuts the window: its schedule has no slot after it. An excluded slot has
    the ticker's skipped run (reason ``calendar: ...``); the calendar tells it from the other
    skipped runs the database cannot name."""
    timing = timing_of(schedule)
    start = max(since, schedule["start_at"] or schedule["created_at"])
    name = schedule["name"]
    known = facts(schedule, timing, now, retention)
    ended_at = None
    try:
        cal = from_row(schedule["calendar"], schedule["timezone"])
    except TimingError as e:
        empty = Ledger(known, limit).result(name, describe(timing), start, until)
        return replace(empty, error=str(e))
    if cal is not None and cal.exclude:
        known = replace(known, excluded=lambda us: cal.excluded(instant(us)) is not None)
    ledger = Ledger(known, limit)
    end = cal.end() if cal is not None else None
    if end is not None and end <= until:
        until, ended_at = end - _MICROSECOND, end
    if start <= until:
        runs = run_chunks(conn, name, timing, start, until)
        try:
            ledger.merge(slot_chunks(timing, start, until), runs)
        except TimingError as e:
            # no slot of it can be told: the schedule's ledger is its error
            empty = Ledger(ledger.facts, limit).result(name, describe(timing), start, until)
            return replace(empty, error=str(e), ended_at=ended_at)
        finally:
            runs.close()  # its cursor, when the merge stopped early
    return replace(ledger.result(name, describe(timing), start, until), ended_at=ended_at)


def facts(schedule: dict[str, Any], timing: Timing, now: datetime, retention: timedelta | None) -> Facts:
    """What explains a slot of `schedule` without a run, as of `now`."""
    nxt: datetime | None = schedule["next_run_at"]
    planned = micros(nxt) if nxt is not None else FAR
    kept = schedule["retention"] or retention
    paused_at, broken_at = schedule["paused_at"], schedule["broken_at"]
    paused_text = f"paused since {_iso(paused_at)}" if paused_at else "paused"
    if paused_at and schedule["pause_note"]:
        paused_text += f" ({_first_line(schedule['pause_note'])})"
    broken_text = f"broken since {_iso(broken_at)}" if broken_at else "broken"
    if broken_at and schedule["broken_error"]:
        broken_text += f": {_first_line(schedule['broken_error'])}"
    return Facts(
        now=micros(now),
        created=micros(schedule["created_at"]),
        paused=micros(paused_at) if paused_at else FAR,
        pauses=ended_pauses(schedule),
        # a broken schedule's next slot stays where the ticker could not plan it
        broken=min(planned, micros(broken_at)) if broken_at else FAR,
        disabled=planned if not schedule["enabled"] else FAR,
        planned_until=planned,
        cutoff=micros(now - kept) if kept else -FAR,
        grace=_grace(schedule, timing, now) // _MICROSECOND,
        missed_slots=schedule["missed_slots"],
        catchup=schedule["catchup"],
        paused_text=paused_text,
        broken_text=broken_text,
        created_text=f"before the schedule existed (created {_iso(schedule['created_at'])})",
        planned_text=f"not created yet: the ticker's next slot to plan is {_iso(nxt)}" if nxt else "",
        cutoff_text=f"older than the retention ({span_text(kept)}): its run may have been removed"
        if kept
        else "",
    )


def ended_pauses(schedule: dict[str, Any]) -> tuple[tuple[int, int, str], ...]:
    """The pauses that began and ended in the schedule's audit (its schedule_ledger row's pause_*
    arrays, in order): each as [start, end) in microseconds and its text, with the note the pause
    last had. A pause without its resume there (the one still on, or one ended by hand in the
    table) is left out."""
    ended: list[tuple[int, int, str]] = []
    start: datetime | None = None
    note: str | None = None
    log = zip(
        schedule["pause_at"] or (),
        schedule["pause_action"] or (),
        schedule["pause_outcome"] or (),
        schedule["pause_notes"] or (),
        strict=True,
    )
    for at, action, outcome, given in log:
        if action == "pause":
            if start is None and outcome == "paused":
                start, note = at, given
            elif start is not None and given is not None:
                note = given
        elif start is not None:  # the resume that ends it
            text = f"paused from {_iso(start)} to {_iso(at)}"
            if note:
                text += f" ({_first_line(note)})"
            ended.append((micros(start), micros(at), text))
            start = note = None
    return tuple(ended)


def _grace(schedule: dict[str, Any], timing: Timing, now: datetime) -> timedelta:
    if schedule["grace"] is not None:
        grace: timedelta = schedule["grace"]
        return grace
    try:
        return default_grace(nominal_interval(timing, now))
    except TimingError:
        return MAX_GRACE


# -- the two streams -------------------------------------------------------------------------------


def slot_chunks(timing: Timing, start: datetime, until: datetime) -> Iterator[array[int]]:
    """The slots of `timing` in [start, until], ascending, in chunks of microseconds since
    2000-01-01 UTC: an interval schedule's by arithmetic from its first slot, a cron schedule's a day
    at a time (fleet.timing.schedule.slot_offsets), a chunk at a time."""
    if timing.every is not None:
        first = first_slot_at_or_after(timing, start)
        last = latest_slot_at_or_before(timing, until)
        if first is None or last is None or first > last:
            return
        step = timing.every // _MICROSECOND
        high = micros(last)
        for low in range(micros(first), high + 1, step * CHUNK):
            yield array("q", range(low, min(high + 1, low + step * CHUNK), step))
        return
    chunk = array("q")
    for base, offsets in slot_offsets(timing, start, until):
        at = micros(base)
        chunk.extend([at + offset for offset in offsets])
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = array("q")
    if chunk:
        yield chunk


def run_chunks(
    conn: psycopg.Connection[Any], name: str, timing: Timing, start: datetime, until: datetime
) -> Generator[tuple[array[int], array[int]]]:
    """The schedule's runs in [start, until] in slot order, in chunks: their slots (microseconds
    since 2000-01-01 UTC) and their codes (fleet/sql/ledger.sql, run_ledger). One statement,
    streamed through a server-side cursor a few spans at a time, merged with the outcomes the slot
    ledger kept of runs that retention removed (fleet.slot_outcomes)."""
    try:
        cadence = nominal_interval(timing, start)
    except TimingError:
        cadence = timedelta(minutes=1)
    span = until - start
    # spans of about CHUNK slots each: a few dozen rows for a year of a one-minute schedule
    spans = max(1, min(span // max(cadence, timedelta(seconds=1)) // CHUNK, 100_000))
    step_us = max(1, (span // _MICROSECOND) // spans + 1)
    kept = _outcomes(conn, name, start, until)
    with conn.cursor(name="fleet_ledger", binary=True, row_factory=tuple_row) as cur:
        cur.itersize = 16
        cur.execute(q("run_ledger"), {"name": name, "from": start, "until": until, "step_us": step_us})
        live = (_unpacked(packed) for (packed,) in cur if packed)
        yield from _with_outcomes(live, kept) if kept[0] else live


def _unpacked(packed: bytes) -> tuple[array[int], array[int]]:
    """16-byte ledger records (big-endian slot, code) as two arrays: slots and codes."""
    values = array("q", packed)
    if not _BIG_ENDIAN:
        values.byteswap()
    return values[0::2], values[1::2]


def _outcomes(
    conn: psycopg.Connection[Any], name: str, start: datetime, until: datetime
) -> tuple[array[int], array[int]]:
    """The outcomes the slot ledger kept of the schedule's removed runs in [start, until]: slots,
    ascending and each once (a slot removed twice, run again by a backfill meanwhile, keeps its
    latest outcome), and their codes."""
    slots, codes = array("q"), array("q")
    ordered = True
    with conn.cursor(binary=True, row_factory=tuple_row) as cur:
        rows = cur.execute(q("outcome_ledger"), {"name": name, "from": start, "until": until}).fetchall()
    for (packed,) in rows:
        more_slots, more_codes = _unpacked(packed)
        ordered = ordered and (not slots or not more_slots or slots[-1] < more_slots[0])
        slots.extend(more_slots)
        codes.extend(more_codes)
    if not ordered:
        latest = dict(zip(slots, codes, strict=True))
        slots = array("q", sorted(latest))
        codes = array("q", [latest[s] for s in slots])
    low, high = bisect.bisect_left(slots, micros(start)), bisect.bisect_right(slots, micros(until))
    return slots[low:high], codes[low:high]


def _with_outcomes(
    live: Iterator[tuple[array[int], array[int]]], kept: tuple[array[int], array[int]]
) -> Iterator[tuple[array[int], array[int]]]:
    """The live runs' chunks and the kept outcomes as one ascending stream. Where a slot has both (a
    backfill ran it again after its run was removed), the live run stands."""
    slots, codes = kept
    i = 0
    for run_slots, run_codes in live:
        # the outcomes before this chunk's first run, as they are
        j = bisect.bisect_left(slots, run_slots[0], i)
        if j > i:
            yield slots[i:j], codes[i:j]
            i = j
        # the outcomes among this chunk's runs: merged one by one (rare: removed runs are older)
        j = bisect.bisect_right(slots, run_slots[-1], i)
        if j == i:
            yield run_slots, run_codes
            continue
        merged = sorted(
            [*zip(slots[i:j], codes[i:j], strict=True), *zip(run_slots, run_codes, strict=True)],
            key=lambda pair: pair[0],
        )
        keep_slots, keep_codes = array("q"), array("q")
        live_slots = set(run_slots)
        live_codes = dict(zip(run_slots, run_codes, strict=True))
        for slot, code in merged:
            if keep_slots and keep_slots[-1] == slot:
                continue
            keep_slots.append(slot)
            keep_codes.append(live_codes[slot] if slot in live_slots else code)
        yield keep_slots, keep_codes
        i = j
    if i < len(slots):
        yield slots[i:], codes[i:]


# -- small helpers ---------------------------------------------------------------------------------


def span_text(span: timedelta) -> str:
    """A length of time in days, hours, minutes and whole seconds, e.g. ``366d``, ``1d2h30m``, ``45s``."""
    seconds = round(span.total_seconds())
    parts = [
        (seconds // 86400, "d"),
        (seconds // 3600 % 24, "h"),
        (seconds // 60 % 60, "m"),
        (seconds % 60, "s"),
    ]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


def _iso(at: datetime) -> str:
    return instant(micros(at)).isoformat().replace("+00:00", "Z")


def _first_line(text: str, width: int = 200) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= width else line[: width - 3] + "..."
