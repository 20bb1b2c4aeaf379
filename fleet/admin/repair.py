"""An operator's repairs of schedules and runs: retry, discard, trigger, pause, resume.

Each is one short transaction and idempotent: a second call changes nothing. Each that changes
something records an audit row in the same transaction (fleet.admin.audit), with the operator's `by`
and note. Naming an unknown schedule or slot changes nothing and raises UnknownSchedule or
UnknownRun; `fleet.Client` and fleetctl's commands of the same names are built on these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg

from fleet.admin.audit import MAX_NOTE_CHARS, audit_record, check_by, check_note, slots_detail
from fleet.errors import RequestError, RunStateError, UnknownSchedule
from fleet.health.reading import aware, run_get, schedule_get
from fleet.health.results import Triggered
from fleet.store.queries import q
from fleet.timing.schedfile import MAX_ARGS_BYTES, args_json
from fleet.timing.schedule import TimingError, first_slot_at_or_after, timing_of


def _is_discarded(run: dict[str, Any]) -> bool:
    return bool(run["status"] == "skipped" and run["last_outcome"] == "discarded")


def _wake_workers(conn: psycopg.Connection[Any]) -> None:
    conn.execute(q("run_notify"))


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _slots(rows: Iterable[dict[str, Any]]) -> list[datetime]:
    return [r["scheduled_for"].astimezone(UTC) for r in rows]


# -- retry and discard ---------------------------------------------------------------------------


def run_retry(
    conn: psycopg.Connection[Any],
    schedule: str,
    slot: datetime | None,
    now: datetime | None = None,
    *,
    by: str | None = None,
    note: str | None = None,
) -> list[datetime]:
    """Make a dead (or discarded) run pending and due now, or with `slot` None every dead run of the
    schedule; returns the slots retried. The attempt history is kept and the retry budget starts over.

    A run that is already pending or running retries nothing (a second call is a no-op); a done or
    skipped run raises RunStateError, an unknown schedule or slot UnknownSchedule or UnknownRun.
    """
    by, note = check_by(by), check_note(note, "note")
    if slot is None:
        schedule_get(conn, schedule)
    else:
        run = run_get(conn, schedule, slot)
        slot = run["scheduled_for"]
        if run["status"] in ("pending", "running"):
            return []
        if run["status"] != "dead" and not _is_discarded(run):
            raise RunStateError(schedule, run["scheduled_for"], run["status"], "retry")
    with conn.transaction():
        retried = _slots(conn.execute(q("run_retry"), {"name": schedule, "slot": slot, "now": now}))
        if retried:
            audit_record(conn, "retry", [schedule], [slots_detail(retried)], by=by, note=note)
            _wake_workers(conn)
    return retried


def run_discard(
    conn: psycopg.Connection[Any],
    schedule: str,
    slot: datetime | None,
    *,
    by: str | None = None,
    note: str | None = None,
) -> list[datetime]:
    """Acknowledge a dead run (or with `slot` None every dead run of the schedule) so that health is
    OK again; returns the slots discarded.

    A discarded run becomes `skipped` with last_outcome `discarded` (its error and attempts stay; prune
    may delete it; retry can bring it back). Discarding it again is a no-op; a run that is not dead
    raises RunStateError, an unknown schedule or slot UnknownSchedule or UnknownRun.
    """
    by, note = check_by(by), check_note(note, "note")
    if slot is None:
        schedule_get(conn, schedule)
    else:
        run = run_get(conn, schedule, slot)
        slot = run["scheduled_for"]
        if _is_discarded(run):
            return []
        if run["status"] != "dead":
            raise RunStateError(schedule, run["scheduled_for"], run["status"], "discard")
    with conn.transaction():
        discarded = _slots(conn.execute(q("run_discard"), {"name": schedule, "slot": slot}))
        if discarded:
            audit_record(conn, "discard", [schedule], [slots_detail(discarded)], by=by, note=note)
    return discarded


# -- trigger -------------------------------------------------------------------------------------


def trigger_args(args: Mapping[str, Any] | None, field: str = "args") -> str | None:
    """The JSON text of a trigger's arguments (None: the schedule's own); RequestError naming
    `field` unless they are a mapping with string keys that JSON can hold, without a NUL character,
    in at most MAX_ARGS_BYTES (64 KiB) of JSON: what a schedules file's args may hold."""
    if args is None:
        return None
    if not isinstance(args, Mapping):
        raise RequestError(f"{field}: must be a JSON object (a mapping), got {type(args).__name__}")
    encoded, problems = args_json(dict(args), field, MAX_ARGS_BYTES)
    if problems or encoded is None:
        raise RequestError(problems[0] if problems else f"{field}: cannot be written as JSON")
    return encoded.decode()


def run_trigger(
    conn: psycopg.Connection[Any],
    schedule: str,
    args: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    *,
    by: str | None = None,
    note: str | None = None,
) -> Triggered:
    """Create a run now, as its own slot (the database's now() to the second, origin 'trigger'),
    with `args` instead of the schedule's when given. Within the same second a second call creates
    nothing (and its `args` are not used)."""
    text = trigger_args(args)
    by, note = check_by(by), check_note(note, "note")
    schedule_get(conn, schedule)
    with conn.transaction():
        row = conn.execute(q("run_trigger"), {"name": schedule, "now": now, "args": text}).fetchone()
        assert row is not None
        if row["created"]:
            detail: dict[str, Any] = {"slot": _iso(row["slot"])}
            if text is not None:
                detail["args"] = "given"  # the arguments themselves stay in the run
            audit_record(conn, "trigger", [schedule], [detail], by=by, note=note)
            _wake_workers(conn)
    return Triggered(schedule=schedule, slot=row["slot"].astimezone(UTC), created=bool(row["created"]))


# -- pause, resume -------------------------------------------------------------------------------


# An operator's note on a pause or resume is one short line for people, shown by `status`
# (MAX_NOTE_CHARS, check_note: fleet.admin.audit's, the same note is the audit row's).
__all__ = ["MAX_NOTE_CHARS", "check_note"]


def schedule_pause(
    conn: psycopg.Connection[Any],
    schedule: str,
    now: datetime | None = None,
    note: str | None = None,
    *,
    by: str | None = None,
) -> bool:
    """Stop creating slots for the schedule; False when it was paused already.

    The slots that come due while paused are never created, and runs created ahead of their time
    and not due yet are removed. A run waiting to retry after a failed attempt is held: its next
    attempt waits for the resume. A run already due (or triggered) still starts once, an attempt
    in progress goes on, and one whose worker died is taken over as usual. The note (why)
    replaces an earlier one; pausing anew without a note keeps it.
    """
    note, by = check_note(note), check_by(by)
    schedule_get(conn, schedule)
    with conn.transaction():
        # The pause locks the schedule's row first (waiting for a ticker creating its slots), then
        # the runs created ahead are removed, and next_run_at goes back to the first of them.
        paused = conn.execute(q("schedule_pause"), {"name": schedule, "now": now}).fetchone() is not None
        conn.execute(q("slot_withdraw"), {"names": [schedule], "rewind": True, "now": now})
        if paused or note is not None:
            conn.execute(q("schedule_note"), {"name": schedule, "note": note})
            audit_record(
                conn, "pause", [schedule], [{"outcome": "paused" if paused else "note"}], by=by, note=note
            )
    return paused


def schedule_resume(
    conn: psycopg.Connection[Any],
    schedule: str,
    now: datetime | None = None,
    note: str | None = None,
    *,
    by: str | None = None,
) -> datetime | None:
    """Create slots again from now on; returns the next slot, or None when it was not paused.

    The next slot is planned from the database's now(), so the paused stretch is not caught up
    however long it was; the retries the pause held are due at once. The pause's note is replaced
    by `note` (cleared without one).
    """
    note, by = check_note(note), check_by(by)
    with conn.transaction():
        row = conn.execute(q("schedule_lock"), {"name": schedule, "now": now}).fetchone()
        if row is None:
            raise UnknownSchedule([schedule])
        if row["paused_at"] is None:
            return None
        try:
            nxt = first_slot_at_or_after(timing_of(row), row["db_now"])
        except TimingError:
            nxt = None
        if nxt is None:
            # No slot to plan: the ticker evaluates it from now and marks it broken, with the reason.
            nxt = row["db_now"]
        conn.execute(q("schedule_resume"), {"name": schedule, "next_run_at": nxt, "now": now})
        conn.execute(q("schedule_note"), {"name": schedule, "note": note})
        audit_record(conn, "resume", [schedule], [{"next_slot": _iso(nxt)}], by=by, note=note)
        conn.execute(q("schedule_notify"))  # tickers re-read their next wake-up at once
        _wake_workers(conn)  # and workers claim the retries the pause held
    return None if nxt is None else aware(nxt, "next slot")
