"""Reading what the fleet is doing: each schedule's health, a schedule's runs, one run's attempts.

The functions take an open connection and raise fleet's own errors for an unknown schedule or run;
`fleet.Client` and fleetctl's `status`, `runs` and `show` are built on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, get_args

import psycopg

from fleet import health
from fleet.errors import RequestError, UnknownRun, UnknownSchedule
from fleet.queries import q
from fleet.registry import STALE_AFTER_S
from fleet.results import RUN_STATUSES, Attempt, Run, RunHistory, RunStatus, ScheduleHealth, utc
from fleet.schedule import TimingError, latest_slot_at_or_before, next_slot, nominal_interval, timing_of

DEFAULT_RUNS_LIMIT = 20


def aware(value: datetime, name: str) -> datetime:
    """`value` in UTC; RequestError naming `name` when it has no time zone (which instant it means
    would depend on the database session's)."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise RequestError(f"{name}: a timezone-aware datetime is needed, got {value!r}")
    return value.astimezone(UTC)


# -- what a request names ------------------------------------------------------------------------


def schedule_get(conn: psycopg.Connection[Any], name: str, now: datetime | None = None) -> dict[str, Any]:
    """The schedule's row plus the database's `db_now`; UnknownSchedule when there is none."""
    row: dict[str, Any] | None = conn.execute(q("schedule_get"), {"name": name, "now": now}).fetchone()
    if row is None:
        raise UnknownSchedule([name])
    return row


def schedules_require(conn: psycopg.Connection[Any], names: Sequence[str]) -> None:
    """UnknownSchedule naming every schedule in `names` that does not exist."""
    if not names:
        return
    found = {r["name"] for r in conn.execute(q("schedule_names"), {"names": list(names)})}
    missing = [n for n in dict.fromkeys(names) if n not in found]
    if missing:
        raise UnknownSchedule(missing)


def run_get(conn: psycopg.Connection[Any], name: str, slot: datetime) -> dict[str, Any]:
    """The run of `name` at `slot`; UnknownSchedule or UnknownRun when there is none."""
    slot = aware(slot, "slot")
    row: dict[str, Any] | None = conn.execute(q("run_get"), {"name": name, "slot": slot}).fetchone()
    if row is None:
        raise UnknownRun(name, slot, why_no_run(schedule_get(conn, name), slot))
    return row


def why_no_run(schedule: dict[str, Any], slot: datetime) -> str:
    """What to say about a slot without a run: that it is one of the schedule's slots, or the
    schedule's slots nearest to it before and after."""
    try:
        timing = timing_of(schedule)
        before = latest_slot_at_or_before(timing, slot)
        after = next_slot(timing, slot)
    except (TimingError, ValueError):
        return ""
    if before == slot:
        return ": it is a slot of the schedule, whose run was not created (yet) or was pruned"
    nearest = f"{_iso_or_none(before)} before and {_iso_or_none(after)} after"
    return f": not a slot of the schedule; its nearest slots are {nearest}"


def _iso_or_none(t: datetime | None) -> str:
    return "none" if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- health --------------------------------------------------------------------------------------


def _seconds(a: datetime, b: datetime | None) -> float | None:
    return None if b is None else round((a - b).total_seconds(), 3)


def health_of(row: dict[str, Any]) -> ScheduleHealth:
    """Turn a `schedule_health` row into its numbers and verdict."""
    now: datetime = row["db_now"]
    try:
        interval_s: float | None = nominal_interval(timing_of(row), now).total_seconds()
    except TimingError:
        interval_s = None
    quiet_from = max(t for t in (row["last_success_at"], row["updated_at"], row["start_at"]) if t is not None)
    numbers = health.Health(
        interval_s=interval_s,
        quiet_s=max(0.0, (now - quiet_from).total_seconds()),
        dead_runs=row["dead_runs"],
        oldest_pending_age_s=_seconds(now, row["oldest_due"]),
        unserved_runs=row["unserved"],
        paused=row["paused_at"] is not None,
        enabled=row["enabled"],
    )
    found = health.problems(numbers)
    verdict = found[0] if found else "OK"
    return ScheduleHealth(
        name=row["name"],
        verdict=verdict,
        healthy=health.is_healthy(verdict),
        problems=tuple(found),
        since_last_success_s=_seconds(now, row["last_success_at"]),
        quiet_s=round(numbers.quiet_s, 3),
        dead_runs=row["dead_runs"],
        oldest_pending_age_s=numbers.oldest_pending_age_s,
        # a paused or disabled schedule keeps the slot it had planned but creates none: resuming (or
        # applying it again) plans its next slot from then
        next_run_at=utc(row["next_run_at"]) if row["enabled"] and row["paused_at"] is None else None,
        last_outcome=row["last_outcome"] or row["last_status"],
        last_run_at=utc(row["last_slot"]),
        last_success_at=utc(row["last_success_at"]),
        last_error=row["last_error"] if row["last_status"] != "done" else None,
        interval_s=interval_s,
        pending_runs=row["due"],
        waiting_runs=row["pending"] - row["due"],
        running_runs=row["running"],
        unserved_runs=row["unserved"],
        job=row["job"],
        job_served=bool(row["job_served"]),
        paused=numbers.paused,
        pause_note=row["pause_note"],
        paused_at=utc(row["paused_at"]),
        enabled=row["enabled"],
        numbers=numbers,
    )


def schedule_health(
    conn: psycopg.Connection[Any], names: Sequence[str] | None = None, now: datetime | None = None
) -> list[ScheduleHealth]:
    """Health of the named schedules (all when `names` is None or empty), by name; UnknownSchedule
    names the ones that do not exist."""
    if names:
        schedules_require(conn, names)
    rows = conn.execute(
        q("schedule_health"), {"now": now, "names": list(names) if names else None, "stale_s": STALE_AFTER_S}
    ).fetchall()
    return [health_of(r) for r in rows]


# -- runs and attempts ---------------------------------------------------------------------------


def run_list(
    conn: psycopg.Connection[Any],
    schedule: str,
    status: RunStatus | None = None,
    limit: int = DEFAULT_RUNS_LIMIT,
) -> list[Run]:
    """The schedule's runs, newest slot first, at most `limit`, only those with `status` if given."""
    if status is not None and status not in RUN_STATUSES:
        raise RequestError(f"status: must be one of {', '.join(get_args(RunStatus))}, got {status!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise RequestError(f"limit: must be at least 1, got {limit!r}")
    stored, outcome = ("skipped", "discarded") if status == "discarded" else (status, None)
    schedules_require(conn, [schedule])
    rows = conn.execute(
        q("run_list"), {"name": schedule, "status": stored, "outcome": outcome, "limit": limit}
    ).fetchall()
    return [Run.from_row(r) for r in rows]


def _attempt(a: dict[str, Any]) -> Attempt:
    return Attempt(
        attempt=a["attempt"],
        worker_id=a["worker_id"],
        host=a["host"],
        pid=a["pid"],
        started_at=utc(a["started_at"]),
        finished_at=utc(a["finished_at"]),
        outcome=a["outcome"],
        error=a["error"],
        trace_id=a["trace_id"],
        span_id=a["span_id"],
        traced=bool(a.get("traced", False)),
    )


def run_history(conn: psycopg.Connection[Any], schedule: str, slot: datetime) -> RunHistory:
    """The run at `slot` and every attempt of it, the one in flight included."""
    row = run_get(conn, schedule, slot)
    stored = {"name": schedule, "slot": row["scheduled_for"]}
    attempts = [_attempt(a) for a in conn.execute(q("attempt_list"), stored)]
    if row["status"] == "running" and all(a.attempt != row["attempts"] for a in attempts):
        # the current attempt is recorded in the run row until it ends
        attempts.append(
            Attempt(
                attempt=row["attempts"],
                worker_id=row["locked_by"],
                host=row.get("locked_host"),
                pid=row.get("locked_pid"),
                started_at=utc(row["started_at"]),
                finished_at=None,
                outcome="running",
                error=None,
                trace_id=row["trace_id"],
                span_id=row["span_id"],
                traced=bool(row.get("traced", False)),
            )
        )
    return RunHistory(run=Run.from_row(row), attempts=tuple(attempts))
