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
from fleet.rollup import MARGIN_S
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


Cadences = dict[tuple[Any, ...], float | None]


def _cadence(row: dict[str, Any], now: datetime, known: Cadences) -> float | None:
    """The schedule's cadence near now when the database has none stored for now (a cron schedule
    the roll-up has not reached yet): evaluated once per distinct timing in `known`."""
    key = (row["cron"], row["timezone"], row["start_at"], row["dst_repeated"], row["dst_missing"])
    if key not in known:
        try:
            known[key] = nominal_interval(timing_of({**row, "every": None}), now).total_seconds()
        except (TimingError, ValueError):
            known[key] = None
    return known[key]


_NO_OPEN_RUNS: dict[str, Any] = {
    "running": 0,
    "due": 0,
    "waiting": 0,
    "oldest_due": None,
    "ahead": None,
    "unserved": 0,
}


def health_of(
    row: dict[str, Any], open_runs: dict[str, Any] | None = None, known: Cadences | None = None
) -> ScheduleHealth:
    """Turn a `schedule_health` row and its `run_open_health` row (None: no open runs) into its
    numbers and verdict. `known` shares the cron cadences computed in Python between the rows of
    one read."""
    now: datetime = row["db_now"]
    o = _NO_OPEN_RUNS if open_runs is None else open_runs
    interval_s: float | None = row["interval_s"]
    if interval_s is None and row["cron"] is not None:
        interval_s = _cadence(row, now, {} if known is None else known)
    last_success_at: datetime | None = row["last_success_at"]
    quiet_from: datetime = row["updated_at"]
    if last_success_at is not None and last_success_at > quiet_from:
        quiet_from = last_success_at
    start_at: datetime | None = row["start_at"]
    if start_at is not None and start_at > quiet_from:
        quiet_from = start_at
    quiet_s = (now - quiet_from).total_seconds()
    if quiet_s < 0.0:
        quiet_s = 0.0
    oldest_due: datetime | None = o["oldest_due"]
    oldest_pending_age_s = None if oldest_due is None else round((now - oldest_due).total_seconds(), 3)
    paused_at: datetime | None = row["paused_at"]
    enabled: bool = row["enabled"]
    dead_runs: int = row["dead_runs"]
    unserved: int = o["unserved"]
    numbers = health.Health(
        interval_s, quiet_s, dead_runs, oldest_pending_age_s, unserved, paused_at is not None, enabled
    )
    found = health.problems(numbers)
    verdict = found[0] if found else "OK"
    last_status: str | None = row["last_status"]
    # the earliest slot created ahead of its time, else the one the ticker will create next
    next_run_at: datetime | None = o["ahead"] or row["next_run_at"]
    return ScheduleHealth(
        name=row["name"],
        verdict=verdict,
        healthy=verdict not in health.UNHEALTHY,
        problems=tuple(found),
        since_last_success_s=None
        if last_success_at is None
        else round((now - last_success_at).total_seconds(), 3),
        quiet_s=round(quiet_s, 3),
        dead_runs=dead_runs,
        oldest_pending_age_s=oldest_pending_age_s,
        # a paused or disabled schedule keeps the slot it had planned but creates none: resuming (or
        # applying it again) plans its next slot from then
        next_run_at=utc(next_run_at) if enabled and paused_at is None else None,
        last_outcome=row["last_outcome"] or last_status,
        last_run_at=utc(row["last_slot"]),
        last_success_at=utc(last_success_at),
        last_error=row["last_error"] if last_status != "done" else None,
        interval_s=interval_s,
        pending_runs=o["due"],
        waiting_runs=o["waiting"],
        running_runs=o["running"],
        unserved_runs=unserved,
        job=row["job"],
        job_served=bool(row["job_served"]),
        paused=paused_at is not None,
        pause_note=row["pause_note"],
        paused_at=utc(paused_at),
        enabled=enabled,
        numbers=numbers,
    )


def schedule_health(
    conn: psycopg.Connection[Any], names: Sequence[str] | None = None, now: datetime | None = None
) -> list[ScheduleHealth]:
    """Health of the named schedules (all when `names` is None or empty), by name; UnknownSchedule
    names the ones that do not exist. Its cost grows with the schedules, not with their history."""
    if names:
        schedules_require(conn, names)
    params = {
        "now": now,
        "names": list(names) if names else None,
        "stale_s": STALE_AFTER_S,
        "margin_s": MARGIN_S,
    }
    with conn.transaction():
        # One snapshot for both statements. JIT compilation would cost more than it saves: the
        # statements are cheap per schedule, but their estimated cost at many schedules crosses
        # jit_above_cost (seen: 1 s of compiling for a 0.5 s read of 100,000 schedules).
        conn.execute(q("session_nojit"))
        rows = conn.execute(q("schedule_health"), params).fetchall()
        if not rows:
            return []
        # the open runs at the same instant as the rest
        params["now"] = rows[0]["db_now"]
        open_runs = {r["schedule_name"]: r for r in conn.execute(q("run_open_health"), params)}
    known: Cadences = {}
    return [health_of(r, open_runs.get(r["name"]), known) for r in rows]


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
