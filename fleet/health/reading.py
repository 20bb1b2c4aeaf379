"""Reading what the fleet is doing: each schedule's health, a schedule's runs, one run's attempts.

The functions take an open connection and raise fleet's own errors for an unknown schedule or run;
`fleet.Client` and fleetctl's `status`, `runs` and `show` are built on them.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, get_args

import psycopg
from psycopg.rows import tuple_row

from fleet.errors import RequestError, UnknownRun, UnknownSchedule
from fleet.health import verdicts
from fleet.store.queries import q
from fleet.store.registry import CRASH_RECENT_S, STALE_AFTER_S

# The typed records (fleet.health.results, a few dataclasses) are imported by the functions that make them:
# `fleetctl status --json` writes the health read as dicts, and starts without them.
if TYPE_CHECKING:
    from fleet.health.results import Attempt, Run, RunHistory, RunStatus, ScheduleHealth

DEFAULT_RUNS_LIMIT = 20


def aware(value: datetime, name: str) -> datetime:
    """`value` in UTC; RequestError naming `name` when it has no time zone (which instant it means
    would depend on the database session's) or its offset moves it out of years 1 to 9999 in UTC."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise RequestError(f"{name}: a timezone-aware datetime is needed, got {value!r}")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise RequestError(
            f"{name}: out of range in UTC (years 1 to 9999), got {value.isoformat()}"
        ) from None


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
        raise UnknownRun(name, slot, why_no_run(conn, schedule_get(conn, name), slot))
    return row


def why_no_run(conn: psycopg.Connection[Any], schedule: dict[str, Any], slot: datetime) -> str:
    """What to say about a slot without a run: that it is one of the schedule's slots and what
    became of it, or the schedule's slots nearest to it before and after."""
    from fleet.timing.schedule import latest_slot_at_or_before, next_slot, timing_of

    try:
        timing = timing_of(schedule)
        before = latest_slot_at_or_before(timing, slot)
        after = next_slot(timing, slot)
    except Exception:  # noqa: BLE001 - a hint only: a timing that cannot be evaluated gives none
        return ""
    if before == slot:
        return f": it is a slot of the schedule, {_slot_fate(conn, schedule, slot)}"
    nearest = f"{_iso_or_none(before)} before and {_iso_or_none(after)} after"
    return f": not a slot of the schedule; its nearest slots are {nearest}"


def _slot_fate(conn: psycopg.Connection[Any], schedule: dict[str, Any], slot: datetime) -> str:
    """What became of a slot of `schedule` without a run, as `fleetctl verify` tells it over the
    day from the slot on (fleet.health.verify: dropped by the catch-up policy, paused, before the
    schedule started, older than the default retention), or why a later slot has no run yet; the
    general words where the ledger names nothing, or cannot be read here (inside the caller's
    transaction, which its snapshot must begin)."""
    from psycopg.pq import TransactionStatus

    from fleet.health.verify import DEFAULT_WINDOW, verify
    from fleet.timing.schedule import saturating_add

    unknown = "whose run was not created (yet) or was pruned"
    if slot > schedule["db_now"]:
        for held, text in (
            (schedule["paused_at"] is not None, "paused"),
            (schedule["broken_at"] is not None, "broken"),
            (not schedule["enabled"], "disabled"),
        ):
            if held:
                return f"not created yet: the schedule is {text}"
        nxt: datetime | None = schedule["next_run_at"]
        if nxt is None or nxt > slot:  # planned already: its run went away
            return unknown
        return f"not created yet: the ticker's next slot to plan is {_iso_or_none(nxt)}"
    if conn.info.transaction_status != TransactionStatus.IDLE:
        return unknown
    try:
        ledger = verify(conn, [schedule["name"]], slot, saturating_add(slot, DEFAULT_WINDOW)).schedules[0]
    except RequestError:  # the schedule went away meanwhile
        return unknown
    if slot < ledger.start:
        if schedule["start_at"] is not None and slot < schedule["start_at"]:
            return f"missed: before the schedule's start_at ({_iso_or_none(schedule['start_at'])})"
        return f"missed: before the schedule existed (created {_iso_or_none(schedule['created_at'])})"
    fate = next((e for e in ledger.entries if e.first <= slot <= e.last), None)
    if fate is None:  # no range of its own: it ran once, unless the listing was cut
        return _REMOVED + "ran once" if not ledger.entries_left_off else unknown
    if fate.outcome == "unexplained":
        return unknown
    if fate.outcome == "unplanned":
        return fate.reason
    if fate.outcome in ("missed", "pruned"):
        return f"{'past retention' if fate.outcome == 'pruned' else fate.outcome}: {fate.reason}"
    # an outcome the ledger kept of a run since removed (retention, prune, a DELETE)
    return _REMOVED + fate.reason


_REMOVED: Final = "whose run was removed; the slot ledger keeps its outcome: "


def _iso_or_none(t: datetime | None) -> str:
    return "none" if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- health --------------------------------------------------------------------------------------


Cadences = dict[tuple[Any, ...], float | None]

# The open runs' part of a schedule without open runs: running, due, waiting, oldest due, ahead,
# unserved, retrying, the earliest slot retrying and its next try; the due runs waiting to retry,
# those of them unserved, the earliest slot of them, and the oldest due without them.
_NO_OPEN_RUNS: Final = (0, 0, 0, None, None, 0, 0, None, None, 0, 0, None, None)
# Schedules per chunk of a read: the database sends the next ones while the last are turned into health.
HEALTH_CHUNK: Final = 2000
# The fields of a schedule's health, in the order of fleet.health.results.ScheduleHealth's (a test checks
# it): here so that a read of the health as rows or dicts starts without the typed records.
HEALTH_FIELDS: Final = (
    "name",
    "verdict",
    "healthy",
    "problems",
    "since_last_success_s",
    "quiet_s",
    "dead_runs",
    "oldest_pending_age_s",
    "next_run_at",
    "last_outcome",
    "last_run_at",
    "last_success_at",
    "last_error",
    "interval_s",
    "pending_runs",
    "waiting_runs",
    "running_runs",
    "unserved_runs",
    "job",
    "job_served",
    "paused",
    "pause_note",
    "paused_at",
    "enabled",
    "broken_at",
    "broken_error",
    "overlap",
    "retrying_runs",
    "retry_slot",
    "retry_at",
    "deadline_s",
    "overdue_slot",
)


def _cadence(timing: tuple[Any, ...], now: datetime, known: Cadences) -> float | None:
    """The cadence near `now` of a cron timing (cron, timezone, start_at, dst_repeated, dst_missing)
    whose cadence the database has not stored for now (the roll-up has not reached it yet), evaluated
    once per distinct timing in `known`."""
    if timing not in known:
        from fleet.timing.schedule import nominal_interval, timing_of

        cron, timezone, start_at, dst_repeated, dst_missing = timing
        row = {
            "every": None,
            "cron": cron,
            "timezone": timezone,
            "start_at": start_at,
            "dst_repeated": dst_repeated,
            "dst_missing": dst_missing,
        }
        try:
            known[timing] = nominal_interval(timing_of(row), now).total_seconds()
        except Exception:  # noqa: BLE001 - one schedule's timing never stops a read of every schedule's health
            known[timing] = None
    return known[timing]


def health_rows(
    conn: psycopg.Connection[Any],
    names: Sequence[str] | None = None,
    now: datetime | None = None,
    size: int = HEALTH_CHUNK,
    fleet: list[verdicts.FleetHealth] | None = None,
) -> Generator[list[tuple[Any, ...]], None, None]:
    """The health of the named schedules (all when `names` is None or empty), by name, in chunks of
    up to `size`: per schedule a tuple of every ScheduleHealth field, in order (`HEALTH_FIELDS`;
    instants as aware datetimes in UTC). The numbers come out of the database computed, and only the
    verdict is made here, while the database sends the next chunk. Holds a transaction until
    exhausted or closed. Unknown names are not checked (see `schedule_health`). The fleet's tickers,
    read at the same instant, are appended to `fleet` when it is given."""
    yield from _health_read(conn, names, now, size, False, fleet)


def health_report(
    conn: psycopg.Connection[Any], names: Sequence[str] | None = None, now: datetime | None = None
) -> tuple[verdicts.FleetHealth, list[ScheduleHealth]]:
    """The fleet's tickers and the health of the named schedules (all when `names` is None or
    empty), read at one instant; UnknownSchedule names the schedules that do not exist."""
    from fleet.health.results import ScheduleHealth

    if names:
        schedules_require(conn, names)
    seen: list[verdicts.FleetHealth] = []
    found = [
        ScheduleHealth(*v)
        for chunk in _health_read(conn, names, now, HEALTH_CHUNK, False, seen)
        for v in chunk
    ]
    return seen[0], found


def health_chunks(
    conn: psycopg.Connection[Any],
    names: Sequence[str] | None = None,
    now: datetime | None = None,
    size: int = HEALTH_CHUNK,
) -> Generator[list[dict[str, Any]], None, None]:
    """`health_rows` with each schedule's health as a dict of its fields, in order: what
    `fleetctl status --json` prints for it."""
    yield from _health_read(conn, names, now, size, as_dicts=True)


def _health_read(
    conn: psycopg.Connection[Any],
    names: Sequence[str] | None,
    now: datetime | None,
    size: int,
    as_dicts: bool,
    fleet_seen: list[verdicts.FleetHealth] | None = None,
) -> Generator[list[Any], None, None]:
    params: dict[str, Any] = {
        "now": now,
        "names": list(names) if names else None,
        "every": not names,  # every schedule, else the named ones
        "stale_s": STALE_AFTER_S,
        "crash_s": CRASH_RECENT_S,
        "margin_s": verdicts.ROLLUP_MARGIN_S,
    }
    problems_of, unhealthy, no_open = verdicts.problems_of, verdicts.UNHEALTHY, _NO_OPEN_RUNS
    known: Cadences = {}
    with conn.transaction():
        # One snapshot and one instant for both statements. JIT compilation would cost more than it
        # saves: the statements are cheap per schedule, but their estimated cost at many schedules
        # crosses jit_above_cost (seen: 1 s of compiling for a 0.5 s read of 100,000 schedules).
        # Instants come back in UTC.
        clock = conn.execute(q("health_session"), params).fetchone()
        assert clock is not None
        at: datetime = clock["now"]
        params.update(now=at, served=clock["served"], since=clock["since"], done=clock["done"])
        params["cursor"] = clock["cursor"]
        fleet = _fleet_health(clock, at)
        if fleet_seen is not None:
            fleet_seen.append(fleet)
        fleet_found = fleet.problems
        with conn.cursor(row_factory=tuple_row, binary=True) as cur:
            open_runs: dict[str, tuple[Any, ...]] = {
                r[0]: r[1:] for r in cur.execute(q("run_open_health"), params).fetchall()
            }
            deadlines, overdue = _deadlines(conn, params, at)
            out: list[Any] = []
            for (
                name,
                job,
                job_served,
                enabled,
                paused_at,
                pause_note,
                next_run_at,
                interval_s,
                cron,
                timezone,
                start_at,
                dst_repeated,
                dst_missing,
                last_success_at,
                quiet_s,
                since_s,
                last_slot,
                last_status,
                last_outcome,
                last_error,
                dead_runs,
                broken_at,
                broken_error,
                overlap,
                calendar,
                calendar_zone,
            ) in cur.stream(q("schedule_health"), params, size=size):
                (
                    running,
                    due,
                    waiting,
                    oldest_due_s,
                    ahead,
                    unserved,
                    retrying,
                    retry_slot,
                    retry_at,
                    due_retries,
                    due_retries_unserved,
                    due_retry_slot,
                    oldest_first_due_s,
                ) = open_runs.get(name, no_open)
                if interval_s is None and cron is not None:
                    interval_s = _cadence((cron, timezone, start_at, dst_repeated, dst_missing), at, known)
                paused = paused_at is not None
                if paused:
                    # a pause holds the runs waiting to retry (the claim leaves them): not due, and
                    # not retried at a time of their own until the resume
                    retry_at = None
                    if due_retries:
                        due, oldest_due_s = due - due_retries, oldest_first_due_s
                        unserved -= due_retries_unserved
                        retrying += due_retries
                        retry_slot = due_retry_slot if retry_slot is None else min(retry_slot, due_retry_slot)
                ended = False
                if calendar is not None:
                    ended, quiet_s = _calendar_health(calendar, calendar_zone, at, quiet_s)
                found = problems_of(
                    interval_s,
                    quiet_s,
                    dead_runs,
                    oldest_due_s,
                    unserved,
                    paused,
                    enabled,
                    broken_at is not None,
                    fleet_found,
                    retrying,
                    name in overdue,
                    ended,
                )
                verdict = found[0] if found else "OK"
                healthy = verdict not in unhealthy
                # the earliest slot created ahead of its time, else the one the ticker will create
                # next; a paused or disabled schedule keeps the slot it had planned but creates none:
                # resuming (or applying it again) plans its next slot from then
                next_slot = (ahead or next_run_at) if enabled and not paused else None
                outcome = last_outcome or last_status
                error = last_error if last_status != "done" else None
                # A dict written as such costs a third less than one made from the tuple.
                if as_dicts:
                    out.append(
                        {
                            "name": name,
                            "verdict": verdict,
                            "healthy": healthy,
                            "problems": found,
                            "since_last_success_s": since_s,
                            "quiet_s": quiet_s,
                            "dead_runs": dead_runs,
                            "oldest_pending_age_s": oldest_due_s,
                            "next_run_at": next_slot,
                            "last_outcome": outcome,
                            "last_run_at": last_slot,
                            "last_success_at": last_success_at,
                            "last_error": error,
                            "interval_s": interval_s,
                            "pending_runs": due,
                            "waiting_runs": waiting,
                            "running_runs": running,
                            "unserved_runs": unserved,
                            "job": job,
                            "job_served": job_served,
                            "paused": paused,
                            "pause_note": pause_note,
                            "paused_at": paused_at,
                            "enabled": enabled,
                            "broken_at": broken_at,
                            "broken_error": broken_error,
                            "overlap": overlap,
                            "retrying_runs": retrying,
                            "retry_slot": retry_slot,
                            "retry_at": retry_at,
                            "deadline_s": deadlines.get(name),
                            "overdue_slot": overdue.get(name),
                        }
                    )
                else:
                    out.append(
                        (
                            name,
                            verdict,
                            healthy,
                            found,
                            since_s,
                            quiet_s,
                            dead_runs,
                            oldest_due_s,
                            next_slot,
                            outcome,
                            last_slot,
                            last_success_at,
                            error,
                            interval_s,
                            due,
                            waiting,
                            running,
                            unserved,
                            job,
                            job_served,
                            paused,
                            pause_note,
                            paused_at,
                            enabled,
                            broken_at,
                            broken_error,
                            overlap,
                            retrying,
                            retry_slot,
                            retry_at,
                            deadlines.get(name),
                            overdue.get(name),
                        )
                    )
                if len(out) == size:
                    yield out
                    out = []
            if out:
                yield out


def _deadlines(
    conn: psycopg.Connection[Any], params: dict[str, Any], at: datetime
) -> tuple[dict[str, float], dict[str, datetime]]:
    """The deadline (seconds) of each schedule that has one, and the slot of each that is OVERDUE:
    enabled, unpaused, and the newest of its slots whose deadline has passed (a slot since the
    schedule was created, changed or resumed) has no successful run."""
    deadlines: dict[str, float] = {}
    names: list[str] = []
    slots: list[datetime] = []
    for row in conn.execute(q("schedule_deadlines"), params):
        deadlines[row["name"]] = row["deadline"].total_seconds()
        if not row["enabled"] or row["paused_at"] is not None or row["broken_at"] is not None:
            continue
        from fleet.timing.schedule import latest_slot_at_or_before, timing_of  # only when a schedule has one

        try:
            slot = latest_slot_at_or_before(timing_of(row), at - row["deadline"])
        except Exception:  # noqa: BLE001 - one schedule's timing never stops a read (it is BROKEN)
            continue
        if slot is not None and slot >= row["since"]:
            names.append(row["name"])
            slots.append(slot)
    overdue: dict[str, datetime] = {}
    if names:
        for row in conn.execute(q("run_deadline_missed"), {"names": names, "slots": slots}):
            overdue[row["name"]] = row["slot"]
    return deadlines, overdue


def _calendar_health(calendar: Any, timezone: str, at: datetime, quiet_s: float) -> tuple[bool, float]:
    """Whether a schedule's calendar has ended it at `at`, and its quiet time: not counted while an
    exclusion keeps it quiet, nor before the latest one ended (a week excluded is not LATE)."""
    from fleet.timing.calendars import from_row

    try:
        cal = from_row(calendar, timezone)
    except Exception:  # noqa: BLE001 - the ticker marks it broken; a read goes on
        return False, quiet_s
    if cal is None:
        return False, quiet_s
    end = cal.end()
    ended = end is not None and at >= end
    since = cal.quiet_from(at)
    if since is not None:
        quiet_s = max(0.0, min(quiet_s, round((at - since).total_seconds(), 3)))
    return ended, quiet_s


def _fleet_health(row: dict[str, Any], at: datetime) -> verdicts.FleetHealth:
    """The tickers' part of a health read's first row (see `health_session`), at the read's instant."""
    last = None
    if row["ticker_id"] is not None:
        seen_at = row["ticker_seen_at"]
        last = verdicts.TickerSeen(
            row["ticker_id"], row["ticker_host"], seen_at, round((at - seen_at).total_seconds(), 3)
        )
    crash = None
    if row["crash_id"] is not None:
        crashed_at = row["crashed_at"]
        crash = verdicts.TickerCrash(
            row["crash_id"],
            row["crash_host"],
            crashed_at,
            round((at - crashed_at).total_seconds(), 3),
            row["crash_count"],
            row["crash_error"],
        )
    return verdicts.FleetHealth(row["tickers"], last, row["crashed"], crash, row["crashes"])


def schedule_health(
    conn: psycopg.Connection[Any], names: Sequence[str] | None = None, now: datetime | None = None
) -> list[ScheduleHealth]:
    """Health of the named schedules (all when `names` is None or empty), by name; UnknownSchedule
    names the ones that do not exist. Its cost grows with the schedules, not with their history."""
    return health_report(conn, names, now)[1]


# -- runs and attempts ---------------------------------------------------------------------------


def run_list(
    conn: psycopg.Connection[Any],
    schedule: str,
    status: RunStatus | None = None,
    limit: int = DEFAULT_RUNS_LIMIT,
) -> list[Run]:
    """The schedule's runs, newest slot first, at most `limit`, only those with `status` if given."""
    from fleet.health.results import RUN_STATUSES, Run, RunStatus

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
    from fleet.health.results import Attempt, utc

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
        renewed_at=utc(a.get("renewed_at")),
    )


def run_history(conn: psycopg.Connection[Any], schedule: str, slot: datetime) -> RunHistory:
    """The run at `slot` and every attempt of it, the one in flight included."""
    from fleet.health.results import Attempt, Run, RunHistory, utc

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
