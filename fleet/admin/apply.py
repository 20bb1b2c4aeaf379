"""Applying schedules: make the database's schedules match a list of specs, all or nothing.

Only what changed is written. The stored definitions are read without row locks and compared
field by field; a schedule that is the same is not touched, so re-applying an unchanged file of
any size costs the tickers nothing (they never wait for, nor skip, a row an apply merely read).
Applies serialise among themselves on an advisory lock that tickers and workers never take.
"""

from __future__ import annotations

import contextlib
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Literal

import orjson
import psycopg
from psycopg.types.json import Jsonb

from fleet.admin.audit import audit_record, value_text
from fleet.errors import ScheduleFileError
from fleet.store.keys import APPLY_LOCK
from fleet.store.queries import q
from fleet.timing.calendars import Calendar, first_open_slot
from fleet.timing.schedfile import ScheduleSpec, shown
from fleet.timing.schedule import (
    Timing,
    TimingError,
    describe,
    first_slot_at_or_after,
    format_duration,
    saturating_add,
    slots_between,
)

Outcome = Literal["create", "update", "replan", "disable"]


@dataclass(frozen=True)
class FieldChange:
    """One field of a schedule that differs: its name in the schedules file, old and new values as
    text (`-` for a field left to its default)."""

    field: str
    old: str
    new: str


@dataclass(frozen=True)
class Change:
    """What apply does (or, planning, would do) to one schedule."""

    name: str
    outcome: Outcome
    fields: tuple[FieldChange, ...] = ()
    spec: ScheduleSpec | None = None  # a created schedule's

    @property
    def summary(self) -> str:
        """A created schedule: its timing and job."""
        return f"{describe(self.spec.timing)}, job {self.spec.job}" if self.spec is not None else ""


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    replanned: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    # Every schedule created, changed or disabled, in the order of the specs (then the disabled).
    changes: list[Change] = field(default_factory=list)
    planned: bool = False  # a plan: nothing was written


def _params(spec: ScheduleSpec, next_run_at: datetime | None) -> dict[str, Any]:
    t = spec.timing
    return {
        "name": spec.name,
        "every": t.every,
        "cron": t.cron,
        "timezone": t.timezone,
        "start_at": spec.start_at,
        "dst_repeated": t.dst_repeated,
        "dst_missing": t.dst_missing,
        "job": spec.job,
        "args": Jsonb(spec.args, dumps=lambda o: orjson.dumps(o).decode()),
        "catchup": spec.catchup,
        "max_catchup": spec.max_catchup,
        "max_lateness": spec.max_lateness,
        "grace": spec.grace,
        "overlap": spec.overlap,
        "timeout": spec.timeout,
        "max_attempts": spec.max_attempts,
        "retry_base": spec.retry_base,
        "retry_cap": spec.retry_cap,
        "retention": spec.retention,
        "deadline": spec.deadline,
        "spread": spec.spread,
        "spread_offset": spec.spread_offset(),
        "calendar": spec.calendar.to_json() if spec.calendar is not None else None,
        "next_run_at": next_run_at,
        "timing_hash": spec.timing_hash(),
    }


def _duration_text(d: timedelta) -> str:
    micros = d // timedelta(microseconds=1)
    parts: list[str] = []
    for unit, size in (
        ("d", 86_400_000_000),
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
        ("us", 1),
    ):
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, timedelta):
        return _duration_text(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict | list):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return repr(value) if isinstance(value, str) else str(value)


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, but true is not 1 (as Python's == would have it)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _calendar_part(key: str) -> Callable[[ScheduleSpec], Any]:
    """A part of the spec's calendar (`exclude`, `until`) as the `calendar` column stores it."""

    def get(spec: ScheduleSpec) -> Any:
        stored = spec.calendar.to_json() if spec.calendar is not None else None
        return (stored or {}).get(key)

    return get


def _stored(column: str) -> Callable[[dict[str, Any]], Any]:
    """How a stored definition's value of a field is read: its column, or (`calendar.exclude`,
    `calendar.until`) a part of one."""
    if column.startswith("calendar."):
        key = column.removeprefix("calendar.")
        return lambda old: (old["calendar"] or {}).get(key)
    return operator.itemgetter(column)


# The definition's fields: the name the schedules file gives each, its column, how the spec holds
# it, and how two values compare (instants by instant, intervals by length, args as JSON).
_FIELDS: tuple[tuple[str, str, Callable[[ScheduleSpec], Any], Callable[[Any, Any], bool]], ...] = (
    ("every", "every", lambda s: s.timing.every, _equal),
    ("cron", "cron", lambda s: s.timing.cron, _equal),
    ("timezone", "timezone", lambda s: s.timing.timezone, _equal),
    ("start_at", "start_at", lambda s: s.start_at, _equal),
    ("dst_repeated", "dst_repeated", lambda s: s.timing.dst_repeated, _equal),
    ("dst_missing", "dst_missing", lambda s: s.timing.dst_missing, _equal),
    ("job", "job", lambda s: s.job, _equal),
    ("args", "args", lambda s: s.args, _same_json),
    ("catchup", "catchup", lambda s: s.catchup, _equal),
    ("max_catchup", "max_catchup", lambda s: s.max_catchup, _equal),
    ("max_lateness", "max_lateness", lambda s: s.max_lateness, _equal),
    ("grace", "grace", lambda s: s.grace, _equal),
    ("overlap", "overlap", lambda s: s.overlap, _equal),
    ("timeout", "timeout", lambda s: s.timeout, _equal),
    ("retry.max_attempts", "max_attempts", lambda s: s.max_attempts, _equal),
    ("retry.base", "retry_base", lambda s: s.retry_base, _equal),
    ("retry.cap", "retry_cap", lambda s: s.retry_cap, _equal),
    ("retention", "retention", lambda s: s.retention, _equal),
    ("deadline", "deadline", lambda s: s.deadline, _equal),
    ("spread", "spread", lambda s: s.spread, _equal),
    ("exclude", "calendar.exclude", _calendar_part("exclude"), _same_json),
    ("until", "calendar.until", _calendar_part("until"), _equal),
)


_READ_FIELDS = tuple(
    (name, _stored(column), get, same)
    for name, column, get, same in _FIELDS
    if not column.startswith("calendar.")
)
# The calendar's parts are compared only when the column differs: most schedules have none.
_CALENDAR_FIELDS = tuple(
    (name, _stored(column), get, same)
    for name, column, get, same in _FIELDS
    if column.startswith("calendar.")
)


# What a run copies from its schedule when it is created. A change to one of them (or to the timing)
# replaces the runs created ahead of their time; the other fields are read when a run is claimed,
# or decide only what happens to slots in the past.
# copied into runs created ahead (the spread into their run_after and start_by)
_RUN_FIELDS = frozenset({"job", "args", "overlap", "grace", "spread"})


def diff(old: dict[str, Any], spec: ScheduleSpec) -> list[FieldChange]:
    """The fields in which the stored schedule `old` (a `schedule_definitions` row) and `spec`
    differ; `enabled` too, when a disabled schedule comes back."""
    changes = [
        FieldChange(name, _text(stored(old)), _text(get(spec)))
        for name, stored, get, same in _READ_FIELDS
        if not same(stored(old), get(spec))
    ]
    if old["calendar"] != (spec.calendar.to_json() if spec.calendar is not None else None):
        changes += [
            FieldChange(name, _text(stored(old)), _text(get(spec)))
            for name, stored, get, same in _CALENDAR_FIELDS
            if not same(stored(old), get(spec))
        ]
    if not old["enabled"]:
        changes.append(FieldChange("enabled", "false", "true"))
    return changes


def compare_specs(conn: psycopg.Connection[Any], specs: Sequence[ScheduleSpec]) -> list[Change]:
    """What applying `specs` would create, update or re-plan (as `apply --plan` says, without
    `--prune`), reading only their rows: the schedules whose stored definition differs, in the order
    of `specs`."""
    names = [s.name for s in specs]
    stored = {r["name"]: r for r in conn.execute(q("schedule_definitions_named"), {"names": names})}
    changes: list[Change] = []
    for spec in specs:
        old = stored.get(spec.name)
        if old is None:
            changes.append(Change(spec.name, "create", spec=spec))
            continue
        fields = diff(old, spec)
        replan = old["timing_hash"] != spec.timing_hash() or not old["enabled"]
        if fields or replan:
            changes.append(Change(spec.name, "replan" if replan else "update", tuple(fields)))
    return changes


def apply_specs(
    conn: psycopg.Connection[Any],
    specs: Sequence[ScheduleSpec],
    *,
    prune: bool,
    now: datetime | None = None,
    plan: bool = False,
    by: str | None = None,
    note: str | None = None,
) -> ApplyResult:
    """Create and update fleet.schedules in one transaction (and disable the others with `prune`);
    with `plan`, only say what would be done and write nothing.

    A new schedule's first slot is the first at or after `start_at` (or the database's now()); a
    `start_at` in the past is downtime the catch-up policy handles. A changed timing, or a schedule
    enabled again, re-plans from now(). Runs already due or running stay; runs created ahead of
    their time are removed when the timing, job, args or overlap change (with the timing unchanged,
    next_run_at goes back to the first of them, so they are created anew with the new definition)
    and when the schedule is disabled. A schedule whose definition is unchanged is neither written
    nor locked. Two specs of one name raise ScheduleFileError. What changed is recorded in audit
    rows (`by`, `note`: the operator's), in the same transaction.
    """
    by_name = {s.name: s for s in specs}
    if len(by_name) != len(specs):
        twice = sorted(n for n, count in Counter(s.name for s in specs).items() if count > 1)
        raise ScheduleFileError([f"schedule {n!r}: name: declared twice" for n in twice])
    result = ApplyResult(planned=plan)
    with conn.transaction():
        if not plan:
            conn.execute(q("schedule_lock_apply"), {"key": APPLY_LOCK})
        row = conn.execute(q("clock_read"), {"now": now}).fetchone()
        assert row is not None
        db_now: datetime = row["now"]
        stored, unwanted = _compare(conn, by_name)
        # Schedules of one timing (the same cron, say) have the same first slot from the same instant.
        first_slot = lru_cache(maxsize=4096)(first_slot_at_or_after)
        inserts: list[tuple[ScheduleSpec, datetime | None]] = []
        updates: list[tuple[ScheduleSpec, datetime | None]] = []
        recreate: list[str] = []  # runs created ahead go, next_run_at back to the first of them
        replace: list[str] = []  # runs created ahead go, next_run_at re-planned
        silent: list[str] = []  # timings with no slot in the coming years: refused, nothing written
        for spec in specs:
            if spec.name not in stored:
                start = spec.start_at if spec.start_at is not None else db_now
                problem = _never_fires(spec, max(start, db_now), first_slot) or _spread_too_wide(
                    spec, max(start, db_now)
                )
                if problem:
                    silent.append(problem)
                    continue
                inserts.append((spec, first_slot(spec.timing, start)))
                result.created.append(spec.name)
                result.changes.append(Change(spec.name, "create", spec=spec))
                continue
            compared = stored[spec.name]
            if compared is None:
                result.unchanged.append(spec.name)
                continue
            changes, replan = compared
            if replan:
                problem = _never_fires(spec, max(spec.start_at or db_now, db_now), first_slot)
                if problem:
                    silent.append(problem)
                    continue
            if replan or any(c.field == "spread" for c in changes):
                problem = _spread_too_wide(spec, max(spec.start_at or db_now, db_now))
                if problem:
                    silent.append(problem)
                    continue
            nxt = first_slot(spec.timing, db_now + timedelta(microseconds=1)) if replan else None
            updates.append((spec, nxt))
            if replan:
                replace.append(spec.name)
            elif any(c.field in _RUN_FIELDS for c in changes):
                recreate.append(spec.name)
            (result.replanned if replan else result.updated).append(spec.name)
            result.changes.append(Change(spec.name, "replan" if replan else "update", changes))
        if silent:
            raise ScheduleFileError(silent)
        if prune:
            result.disabled = unwanted
            result.changes.extend(Change(n, "disable") for n in result.disabled)
        if plan or not (inserts or updates or result.disabled):
            return result
        with conn.cursor() as cur:
            if inserts:
                _write(cur, "schedule_insert", inserts)
            if updates:
                _write(cur, "schedule_update", updates)
            if result.disabled:
                cur.execute(q("schedule_disable"), {"names": result.disabled})
            # After the updates, which locked the rows (a ticker creates runs only under that lock).
            for names, rewind in ((recreate + result.disabled, True), (replace, False)):
                if names:
                    cur.execute(q("slot_withdraw"), {"names": names, "rewind": rewind, "now": now})
        _audit(conn, result, by, note)
        conn.execute(q("schedule_notify"))  # running tickers pick the change up at once
    return result


# A timing must have a slot within this long of when it applies (now, or its start_at if later):
# one that never fires (a cron whose every time falls in a daylight-saving gap, a date no year
# in reach has) would be accepted and then stay silent for ever.
FIRES_WITHIN = timedelta(days=3653)


def _never_fires(
    spec: ScheduleSpec, base: datetime, first_slot: Callable[[Timing, datetime], datetime | None]
) -> str | None:
    """The problem line when `spec`'s timing has no slot in the FIRES_WITHIN after `base`."""
    where = f"schedule {shown(spec.name)}"
    fieldname = "cron" if spec.timing.cron is not None else "every"
    why = ""
    when = base.astimezone(UTC).strftime("%Y-%m-%d")
    try:
        slot = first_slot(spec.timing, base)
    except TimingError as e:
        slot, why = None, f": {str(e).removeprefix(f'{fieldname}: ')}"
    if slot is None or slot - base > FIRES_WITHIN:
        return f"{where}: {fieldname}: never fires in the 10 years from {when} ({describe(spec.timing)}){why}"
    return _calendar_silent(spec.calendar, spec.timing, base, where, when)


def _calendar_silent(
    cal: Calendar | None, timing: Timing, base: datetime, where: str, when: str
) -> str | None:
    """The problem line when the calendar lets no slot of the timing run within FIRES_WITHIN of
    `base`. A schedule whose `until` is already past is accepted: it has ended, as it says."""
    if cal is None or (cal.until is not None and cal.ended(base)):
        return None
    horizon = saturating_add(base, FIRES_WITHIN)
    try:
        slot = first_open_slot(timing, cal, base, horizon)
    except TimingError:
        return None  # the timing's own check says it
    if slot is not None:
        return None
    end = cal.end()
    if end is not None and end <= horizon:
        return f"{where}: until: no slot runs from {when} to {cal.until.isoformat() if cal.until else ''}" + (
            " (every one is excluded)" if cal.exclude else ""
        )
    return f"{where}: exclude: every slot is excluded in the 10 years from {when} ({describe(timing)})"


# An apply that changes more schedules than this records one fleet-wide audit row with the counts,
# not a row per schedule (a million schedules applied would otherwise write as many rows again).
AUDIT_ROWS_PER_APPLY = 1000


def _audit(conn: psycopg.Connection[Any], result: ApplyResult, by: str | None, note: str | None) -> None:
    """The audit rows of an apply that changed something: one per schedule changed, with the
    fields that changed (old and new, cut short), or one row for the whole apply when it changed
    more than AUDIT_ROWS_PER_APPLY schedules."""
    if not result.changes:
        return
    if len(result.changes) > AUDIT_ROWS_PER_APPLY:
        counts = {
            "created": len(result.created),
            "updated": len(result.updated),
            "replanned": len(result.replanned),
            "disabled": len(result.disabled),
        }
        audit_record(conn, "apply", [None], [counts], by=by, note=note)
        return
    details: list[dict[str, Any]] = []
    for c in result.changes:
        d: dict[str, Any] = {"outcome": c.outcome}
        if c.fields:
            d["fields"] = {f.field: [value_text(f.old), value_text(f.new)] for f in c.fields}
        elif c.spec is not None:
            d["timing"] = value_text(c.summary)
        details.append(d)
    audit_record(conn, "apply", [c.name for c in result.changes], details, by=by, note=note)


# A cron schedule's spread must be less than the shortest gap between two of its slots, as found
# over this many slots from when it applies (an interval schedule's is checked with the file).
SPREAD_CHECK_SLOTS = 1000


def _spread_too_wide(spec: ScheduleSpec, base: datetime) -> str | None:
    """The problem line when a cron schedule's spread is not less than the shortest gap between its
    slots from `base` (over SPREAD_CHECK_SLOTS of them): runs would start after the next slot."""
    if spec.spread is None or spec.timing.cron is None:
        return None
    gap = _shortest_gap(spec.timing, base)
    if gap is None or spec.spread < gap:
        return None
    return (
        f"schedule {shown(spec.name)}: spread: must be less than the shortest interval between"
        f" two slots ({format_duration(gap)}), got {format_duration(spec.spread)}"
    )


@lru_cache(maxsize=4096)
def _shortest_gap(timing: Timing, base: datetime) -> timedelta | None:
    try:
        slots = slots_between(timing, base, datetime.max.replace(tzinfo=UTC), SPREAD_CHECK_SLOTS)
    except TimingError:
        return None  # reported by the never-fires check
    return min((b - a for a, b in zip(slots, slots[1:], strict=False)), default=None)


# Stored definitions are read this many at a time (a server-side cursor), not all at once: what
# apply holds stays near the size of the specs, whatever the number of schedules.
DEFINITIONS_BATCH = 5000
WRITE_BATCH = 5000  # schedules per INSERT or UPDATE


def _compare(
    conn: psycopg.Connection[Any], specs: dict[str, ScheduleSpec]
) -> tuple[dict[str, tuple[tuple[FieldChange, ...], bool] | None], list[str]]:
    """Each stored schedule that a spec names: None when its definition is the same, else the fields
    that differ and whether it re-plans; and the enabled ones no spec names, in name order."""
    stored: dict[str, tuple[tuple[FieldChange, ...], bool] | None] = {}
    unwanted: list[str] = []
    with conn.cursor(name="fleet_apply_definitions") as cur:
        cur.itersize = DEFINITIONS_BATCH
        cur.execute(q("schedule_definitions"))
        for old in cur:
            spec = specs.get(old["name"])
            if spec is None:
                if old["enabled"]:
                    unwanted.append(old["name"])
                continue
            changes = diff(old, spec)
            replan = old["timing_hash"] != spec.timing_hash() or not old["enabled"]
            stored[spec.name] = (tuple(changes), replan) if changes or replan else None
    return stored, unwanted


def _write(
    cur: psycopg.Cursor[Any], statement: str, specs: Sequence[tuple[ScheduleSpec, datetime | None]]
) -> None:
    """Insert or update schedules WRITE_BATCH to a statement, their parameters as one JSON array
    (a statement per schedule took longer than everything else apply does at a million, and one
    array per column as long again as this; COPY is refused by row-level security). Pipelined: the
    server writes one batch while the next is made."""
    with cur.connection.pipeline():
        try:
            for start in range(0, len(specs), WRITE_BATCH):
                rows = [_params(spec, first) for spec, first in specs[start : start + WRITE_BATCH]]
                cur.execute(q(statement), {"rows": orjson.dumps(rows, default=_json_value).decode()})
        except BaseException:
            # Ctrl-C between two statements: one sent may be waiting for a row's lock, and leaving
            # the pipeline waits for its result. Cancelled, it ends now and the transaction rolls back.
            with contextlib.suppress(Exception):  # a connection already lost keeps its own error
                cur.connection.cancel_safe()
            raise


def _json_value(value: Any) -> Any:
    """What orjson cannot write itself: an interval (as PostgreSQL reads it) and jsonb."""
    if isinstance(value, timedelta):
        return f"{value // timedelta(microseconds=1)} microseconds"
    if isinstance(value, Jsonb):
        return value.obj
    raise TypeError(f"{type(value).__name__} is not a schedule column's value")
