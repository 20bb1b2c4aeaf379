"""What `fleet.Client` returns: frozen, typed records of schedules' health, runs and attempts.

Every instant is a timezone-aware `datetime` in UTC; every duration is a float of seconds. Each
record's `to_json()` is the object `fleetctl ... --json` prints for it (instants as ISO-8601 with a
``Z``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, Literal

from fleet.health.verdicts import FLEET_VERDICTS, Health, Verdict

# A run's status as fleetctl shows it: the database's `fleet.run_status`, with a dead run that an
# operator discarded shown as `discarded` (stored as `skipped` with last outcome `discarded`).
RunStatus = Literal["pending", "running", "done", "dead", "skipped", "discarded"]
RUN_STATUSES: tuple[RunStatus, ...] = ("pending", "running", "done", "dead", "skipped", "discarded")
Origin = Literal["schedule", "trigger", "backfill"]


def utc(value: datetime | None) -> datetime | None:
    """The instant in UTC (None stays None)."""
    return None if value is None else value.astimezone(UTC)


def iso(value: datetime | None) -> str | None:
    """An instant as UTC ISO-8601 with a ``Z``, the way slots are named everywhere."""
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class ScheduleHealth:
    """One schedule's health: the numbers and verdict of `fleetctl status`."""

    #: The schedule's name.
    name: str
    #: The most severe condition that holds (BROKEN, DEAD, NO-TICKER, TICKER-CRASHING, NO-WORKER,
    #: OVERDUE, BACKLOG, LATE, RETRYING, PAUSED, DISABLED, ENDED), else OK.
    verdict: Verdict
    #: False for BROKEN, DEAD, NO-TICKER, TICKER-CRASHING, NO-WORKER, OVERDUE, BACKLOG and LATE:
    #: something for an operator to do.
    healthy: bool
    #: Every condition that holds, most severe first (empty when OK).
    problems: tuple[Verdict, ...]
    #: Seconds since the newest successful run finished; None when none ever did.
    since_last_success_s: float | None
    #: Seconds since the last success, or since the schedule was created, changed or resumed if
    #: later: LATE when above two intervals.
    quiet_s: float
    #: Dead runs waiting for an operator's retry or discard.
    dead_runs: int
    #: Seconds the oldest due pending run has waited; None when none waits.
    oldest_pending_age_s: float | None
    #: The next slot the ticker will create; None when there is none, or while paused or disabled.
    next_run_at: datetime | None
    #: How the newest finished run ended (`done`, `dead`, `skipped`, `discarded`, ...); None if none did.
    last_outcome: str | None
    #: The slot of the newest finished run.
    last_run_at: datetime | None
    #: When the newest successful run finished.
    last_success_at: datetime | None
    #: The newest finished run's error, unless it succeeded.
    last_error: str | None
    #: The schedule's own cadence around now in seconds (for cron, the real gap between its slots);
    #: None when it cannot be told, which turns LATE and BACKLOG off.
    interval_s: float | None
    #: Pending runs that are due, waiting for a worker.
    pending_runs: int
    #: Pending runs not due yet (waiting out a retry back-off).
    waiting_runs: int
    #: Runs a worker holds now.
    running_runs: int
    #: Open runs whose job no live worker has registered.
    unserved_runs: int
    #: The job the schedule runs.
    job: str
    #: True when some live worker has registered the job.
    job_served: bool
    #: Paused by an operator (`Client.pause`, `fleetctl pause`).
    paused: bool
    pause_note: str | None  # the operator's note from pause or resume
    #: When an operator paused it (None: not paused).
    paused_at: datetime | None
    #: False once the schedules file no longer has it (`apply` with prune).
    enabled: bool
    #: When a ticker found that the schedule's timing cannot be evaluated (None: it can).
    broken_at: datetime | None = None
    #: Why, in one line starting with the field (``cron: no slot after ...``).
    broken_error: str | None = None
    #: The overlap policy (allow, skip, queue): what a run in progress, or waiting to retry, does to
    #: the schedule's later slots.
    overlap: str = "skip"
    #: Runs waiting out a retry back-off after a failed attempt (RETRYING).
    retrying_runs: int = 0
    #: The slot of the earliest run waiting to retry.
    retry_slot: datetime | None = None
    #: When that run is tried again.
    retry_at: datetime | None = None
    #: The schedule's deadline in seconds: each slot's run is done by slot + deadline (None: none).
    deadline_s: float | None = None
    #: The slot whose run was not done by its deadline (OVERDUE); None when there is none.
    overdue_slot: datetime | None = None

    @property
    def numbers(self) -> Health:
        """The numbers the verdict was made from (see `fleet.health.verdicts`)."""
        return Health(
            self.interval_s,
            self.quiet_s,
            self.dead_runs,
            self.oldest_pending_age_s,
            self.unserved_runs,
            self.paused,
            self.enabled,
            self.broken_at is not None,
            tuple(v for v in self.problems if v in FLEET_VERDICTS),
            self.retrying_runs,
            self.overdue_slot is not None,
            "ENDED" in self.problems,
        )

    def to_json(self) -> dict[str, Any]:
        """The object `fleetctl status --json` prints for this schedule."""
        return {name: _jsonable(getattr(self, name)) for name in HEALTH_FIELDS}


HEALTH_FIELDS = tuple(f.name for f in fields(ScheduleHealth))


@dataclass(frozen=True)
class Run:
    """One run: the row of one slot of a schedule."""

    #: The schedule's name.
    schedule: str
    #: The slot: the instant the run is for (with the schedule, the run's identity).
    slot: datetime
    #: pending, running, done, dead, skipped, or discarded (a dead run an operator acknowledged).
    status: RunStatus
    #: What created it: `schedule` (the ticker), `trigger` or `backfill` (an operator).
    origin: Origin
    #: The job it runs.
    job: str
    #: The arguments the job is given.
    args: dict[str, Any]
    #: Attempts so far: every claim counts one (the fencing token of the worker's writes).
    attempts: int
    #: Attempts that spent the retry budget (errors, timeouts, lost leases).
    failures: int
    #: When it is due (for a pending run: its first try, or the end of its retry back-off).
    run_after: datetime
    #: When its latest attempt started; None before the first.
    started_at: datetime | None
    #: When it finished (done, dead, skipped); None while open.
    finished_at: datetime | None
    #: The worker that holds it now (or held it last).
    locked_by: str | None
    #: When the holding worker's lease runs out.
    locked_until: datetime | None
    #: How the latest attempt ended (`done`, `failed`, `timeout`, `lease_expired`, ...).
    last_outcome: str | None
    #: The latest attempt's error.
    last_error: str | None
    #: The trace of the latest attempt.
    trace_id: str | None
    #: Whether the latest attempt's worker exported its span (every claim makes trace ids, but only
    #: a worker with tracing on sends spans under them).
    traced: bool
    #: The trace and span that created the slot (the ticker's tick, or an operator's command).
    created_trace_id: str | None
    created_span_id: str | None

    def to_json(self) -> dict[str, Any]:
        """The object `fleetctl runs --json` prints for this run."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "created_span_id"}

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> Run:
        """A `fleet.job_runs` row (with `status` as text) as a Run."""
        discarded = r["status"] == "skipped" and r["last_outcome"] == "discarded"
        return cls(
            schedule=r["schedule_name"],
            slot=r["scheduled_for"].astimezone(UTC),
            status="discarded" if discarded else r["status"],
            origin=r["origin"],
            job=r["job"],
            args=r["args"],
            attempts=r["attempts"],
            failures=r["failures"],
            run_after=r["run_after"].astimezone(UTC),
            started_at=utc(r["started_at"]),
            finished_at=utc(r["finished_at"]),
            locked_by=r["locked_by"],
            locked_until=utc(r["locked_until"]),
            last_outcome=r["last_outcome"],
            last_error=r["last_error"],
            trace_id=r["trace_id"],
            traced=bool(r.get("traced", False)),
            created_trace_id=r["created_trace_id"],
            created_span_id=r["created_span_id"],
        )


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run: a claim by a worker and how it ended."""

    #: Its number, from 1 (the run's fencing token at its claim).
    attempt: int
    #: The worker that made it.
    worker_id: str | None
    #: That worker's host and process id.
    host: str | None
    pid: int | None
    #: When it started and ended (None while it runs).
    started_at: datetime | None
    finished_at: datetime | None
    #: How it ended (`done`, `failed`, `timeout`, `lease_expired`, `handed_back`, ...); `running` for
    #: the attempt in flight.
    outcome: str | None
    #: Its error, if it failed.
    error: str | None
    #: Its trace and root span.
    trace_id: str | None
    span_id: str | None
    #: Whether its worker exported that span (a Jaeger search finds it only then).
    traced: bool
    #: An attempt whose lease ran out: when its lease was last taken or renewed, its worker last
    #: heard from (from then the run waited for the lease to run out and a worker to reclaim it).
    #: None for the others, and for attempts recorded before fleet kept it.
    renewed_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """The object `fleetctl show --json` prints for this attempt."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class RunHistory:
    """A run with every attempt of it, oldest first, the one in flight included."""

    #: The run.
    run: Run
    #: Its attempts, oldest first.
    attempts: tuple[Attempt, ...]

    def to_json(self) -> dict[str, Any]:
        """The object `fleetctl show --json` prints, without its Jaeger link."""
        return {
            **self.run.to_json(),
            "created_span_id": self.run.created_span_id,
            "attempt_history": [a.to_json() for a in self.attempts],
        }


@dataclass(frozen=True)
class Triggered:
    """What `Client.trigger` did."""

    #: The schedule.
    schedule: str
    #: The run's slot: the database's now() truncated to the second.
    slot: datetime
    #: False when that slot had a run already (a second trigger within the same second): nothing new.
    created: bool
