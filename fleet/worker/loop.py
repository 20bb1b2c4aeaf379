"""The worker: claim due runs, run their handlers on a fixed set of threads, record outcomes."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from fleet.declare import declared
from fleet.errors import SchemaOutdated
from fleet.jobs import Handler, is_async
from fleet.observe import logs, telemetry
from fleet.process import command_jobs
from fleet.process.settings import WorkerSettings
from fleet.store.db import describe, prepared_statements_broke, redact, resolve_url
from fleet.store.migrate import check_schema
from fleet.store.pool import Pool, make_pool, unavailable
from fleet.store.queries import q
from fleet.store.registry import process_register, process_remove
from fleet.timing.schedule import format_duration
from fleet.worker import spans
from fleet.worker.attempt import LEASE_RAN_OUT, Attempt, Outcome, Verdict, error_text, execute, serve_here
from fleet.worker.claim import OVERLAP_SKIPPED, Skipped, claim_result, send_claim
from fleet.worker.declared import declared_drift
from fleet.worker.eventloop import EventLoop
from fleet.worker.finish import DONE, decide, finish_result, handed_back, send_finish
from fleet.worker.heartbeat import Heartbeat, LeaseWatch
from fleet.worker.listen import Listener
from fleet.worker.previous import PreviousLookup

_STOP_POLL_S = 0.05
# Waiting for the database: borrow attempts this long, so a stop request is seen within a second.
_BORROW_S = 1.0
_HANDBACK_WAIT_S = 5.0
_GATHER_S = 0.002
# The exit code of a worker that abandoned a handler: its supervisor restarts it.
EXIT_ABANDONED = 3
# The exit code of a worker whose stop was forced (a second Ctrl-C), as a program ended by SIGINT.
EXIT_FORCED = 130


def run_round(
    conn: psycopg.Connection[Any],
    batch: list[tuple[Attempt, Outcome]],
    *,
    worker_id: str,
    jobs: Sequence[str],
    limit: int,
    lease_s: float,
    async_jobs: Sequence[str] = (),
    async_limit: int = 0,
) -> tuple[list[tuple[Attempt, Outcome]], set[int], list[Attempt], list[Skipped]]:
    """One round: record the outcomes of `batch` (if any) and claim up to `limit` runs of `jobs`
    and up to `async_limit` of `async_jobs` (if any).

    Pipelined: the planner settings, the finish and the claim travel in one round trip and form one
    transaction, committed by the pipeline's closing Sync (the protocol's implicit transaction: an
    error in any of them rolls back all, nothing needs BEGIN or COMMIT). Returns the batch in the
    order sent, the places in it (from 1) the finish wrote, the attempts claimed and the runs
    recorded as skipped for overlap."""
    with conn.pipeline():
        conn.execute(q("round_configure"))
        fin = None
        if batch:
            batch, fin = send_finish(conn, batch, worker_id=worker_id)
        claim = None
        if limit:
            claim = send_claim(conn, worker_id=worker_id, jobs=jobs, limit=limit, lease_s=lease_s)
        aclaim = None
        if async_limit:
            aclaim = send_claim(
                conn, worker_id=worker_id, jobs=async_jobs, limit=async_limit, lease_s=lease_s
            )
    written = finish_result(fin.fetchall()) if fin else set()
    attempts, skipped = claim_result(claim.fetchall()) if claim else ([], [])
    if aclaim:
        more, also = claim_result(aclaim.fetchall())
        attempts += more
        skipped += also
    return batch, written, attempts, skipped


def turned(jobs: Sequence[str], turn: int) -> Sequence[str]:
    """`jobs` turned round by `turn` places: the order in which a claim walks them."""
    if len(jobs) < 2:
        return jobs
    k = turn % len(jobs)
    return [*jobs[k:], *jobs[:k]]


@dataclass
class WorkerResult:
    claimed: int = 0
    requested: int = 0
    recorded: int = 0
    skipped: int = 0
    full: bool = False  # a claim returned as many runs as it asked for: there may be more at once


class Worker:
    """Claims and runs until `stop` is set; `run_once` does one claim-and-record round."""

    def __init__(
        self, settings: WorkerSettings, handlers: dict[str, Handler], stop: threading.Event | None = None
    ) -> None:
        if not handlers:
            raise ValueError("a worker needs at least one registered job")
        self.settings = settings
        self.handlers = handlers
        self.jobs = sorted(handlers)
        # `async def` jobs run on the event loop, under their own bound; the others on threads.
        self.async_jobs = frozenset(j for j, h in handlers.items() if is_async(h))
        self.sync_jobs = [j for j in self.jobs if j not in self.async_jobs]
        self.async_job_list = sorted(self.async_jobs)
        self._looked_for: list[str] = self.jobs
        # A mixed worker claims its sync and its async jobs with a statement each, every round: a
        # claim seeks straight to its own jobs' due runs (the pending index is by job), so the one
        # for a kind with nothing due costs a few index probes, whatever the other kind's backlog.
        # Claims walk their jobs in the order given, each job's due runs oldest first: the list is
        # turned round by one at every claim, so that one job's backlog holds no other job back.
        self._turn = 0
        self.aio: EventLoop | None = None  # made when there are async jobs
        self.n_async = 0  # async attempts in `inflight`
        # Attempts whose handler was asked to stop (timed out, lease lost) and has not returned
        # yet, with when it was asked: given `abandon_after_s`, then abandoned.
        self.cancelling: dict[tuple[str, Any, int], tuple[Attempt, float]] = {}
        self.abandoned: list[Attempt] = []
        self.exit_code = 0
        self.stop = stop or threading.Event()
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.inflight: dict[tuple[str, Any, int], Attempt] = {}  # by Attempt.ident
        self.to_record: list[tuple[Attempt, Outcome]] = []
        self.todo: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[Attempt] = queue.SimpleQueue()
        self.url = resolve_url(settings.database_url)
        self.pool: Pool | None = None
        self.threads: list[threading.Thread] = []
        self.counts = {"done": 0, "failed": 0, "dead": 0, "handed_back": 0, "fenced": 0}
        self._grace_end_mono: float | None = None
        self.forced = False  # a second Ctrl-C: no grace period, no wait for cancelled handlers
        self._unavailable_log = logs.Throttle()  # db_unavailable: when it starts, then every 30 s
        self._error_log = logs.Throttle()  # db_error: the same, until a round succeeds
        self._erred = False
        self._retried_unprepared = False  # once, after preparing is turned off: no pause
        # Handlers' windows are looked up when first read, on a connection of their own.
        self.look = PreviousLookup.for_url(settings.worker_id, self.url)

    # -- the handler threads -------------------------------------------------------------------

    def _executor(self) -> None:
        tracing = telemetry.enabled()
        while True:
            a = self.todo.get()
            if a is None:
                return
            if not self._may_start(a):
                self._returned(a, ("cancelled", None, None))
                continue
            verdict: Verdict
            try:
                ctx = a.context(self.settings.worker_id, self.look)
                if tracing:
                    with spans.attempt_span(a, ctx):
                        verdict = execute(self.handlers[a.job], ctx)
                else:
                    verdict = execute(self.handlers[a.job], ctx)
            except BaseException as e:  # noqa: BLE001 - the thread serves on whatever happened
                verdict = ("failed", f"the worker could not run the handler: {error_text(e)}", None)
            self._returned(a, verdict)

    def _may_start(self, a: Attempt) -> bool:
        """Whether `a`'s handler may start: it is still this worker's to run, and its lease has not
        run out locally. A worker paused between its claim and here (SIGSTOP, a stall) may find the
        run retaken, or even finished, by another worker meanwhile: it must not start it again."""
        if a.state != "running":
            return False  # handed back by a stopping worker, or fenced
        if time.monotonic() >= a.lease_deadline_mono:
            self.fence(a, LEASE_RAN_OUT)
            return False
        return True

    def _returned(self, a: Attempt, verdict: Verdict) -> None:
        """`a`'s handler returned (or never started): hand it to the loop to collect."""
        with self.lock:
            a.verdict = verdict
            a.returned = True  # from here on a hand-back must not claim this run unfinished
        self.done.put(a)
        # The loop clears `wake` before it collects: an attempt put before a set flag is seen
        # is collected in that round, so a flag already set needs no second (locking) set.
        if not self.wake.is_set():
            self.wake.set()

    # -- state shared with the heartbeat ---------------------------------------------------------

    def running_attempts(self) -> list[Attempt]:
        with self.lock:
            return [a for a in self.inflight.values() if a.state == "running"]

    def fence(self, a: Attempt, reason: str) -> None:
        """The lease is lost: cancel the handler; its outcome will not be written."""
        with self.lock:
            if a.state != "running":
                return
            a.state = "fenced"
            self.cancelling[a.ident] = (a, time.monotonic())
        a.cancel.set()
        self.counts["fenced"] += 1
        self._log("heartbeat_lost", a, outcome="cancelled", error=reason)
        self.wake.set()

    def _record(self, a: Attempt, outcome: Outcome) -> bool:
        with self.lock:
            if a.state != "running":
                return False
            a.state = "recorded"
        self.to_record.append((a, outcome))
        return True

    # -- one round -----------------------------------------------------------------------------

    def run_once(self, conn: psycopg.Connection[Any]) -> WorkerResult:
        """Collect finished handlers and stop overdue ones; then, in one transaction (one commit),
        record the outcomes and claim runs for the free slots."""
        result = WorkerResult()
        self._collect()
        self._check_timeouts()
        if self.cancelling:
            self._check_abandoned()
        batch, self.to_record = self.to_record, []
        s = self.settings
        jobs, limit, async_limit = self.jobs, 0, 0
        if self.stop.is_set():
            pass
        elif self.aio is None:
            limit = max(0, min(s.concurrency - len(self.inflight), s.claim_batch))
        else:
            jobs = self.sync_jobs
            if jobs:
                limit = max(0, min(s.concurrency - (len(self.inflight) - self.n_async), s.claim_batch))
            async_limit = max(0, min(s.async_concurrency - self.n_async, s.claim_batch))
            # When nothing was claimed, the next wait looks at the jobs there was room for.
            self._looked_for = [*(jobs if limit else ()), *(self.async_job_list if async_limit else ())]
        result.requested = limit + async_limit
        if not batch and not result.requested:
            return result
        self._turn += 1
        try:
            batch, written, attempts, skipped = run_round(
                conn,
                batch,
                worker_id=s.worker_id,
                jobs=turned(jobs, self._turn),
                limit=limit,
                lease_s=s.lease_s,
                async_jobs=turned(self.async_job_list, self._turn),
                async_limit=async_limit,
            )
        except psycopg.Error:
            self.to_record = batch + self.to_record  # recorded after reconnecting
            raise
        self._report(batch, written)
        result.recorded = len(batch)
        result.claimed = len(attempts)
        result.skipped = len(skipped)
        if async_limit:
            n = sum(1 for a in attempts if a.job in self.async_jobs)
            result.full = n == async_limit or (bool(limit) and len(attempts) - n == limit)
        else:
            result.full = bool(limit) and len(attempts) == limit
        for k in skipped:
            logs.event(
                "skipped",
                schedule=k.schedule,
                slot=k.slot,
                attempt=None,  # no attempt was made: the same fields as every other run event
                worker_id=self.settings.worker_id,
                outcome="skipped",
                duration_ms=None,
                error=OVERLAP_SKIPPED,
                trace_id=None,
            )
        run: list[Attempt] = []
        for a in attempts:
            if a.reclaimed:
                spans.record_lost_attempt(a, self._before_lost(conn, a))
                self._log("reclaimed", a, previous_worker=a.prev_worker)
            if a.reclaimed and a.failures >= a.max_attempts:
                # The lease ran out on the last allowed try (the handler crashed or stalled its worker):
                # running it again would exceed the budget. Recorded in the next round.
                error = f"lease lost on attempt {a.attempt - 1}, the last of {a.max_attempts}"
                self.to_record.append((a, Outcome("dead", "dead", error)))
                a.state = "recorded"
                continue
            run.append(a)
        with self.lock:
            held = [self.inflight.get(a.ident) for a in run]
            self.inflight.update((a.ident, a) for a, h in zip(run, held, strict=True) if h is None)
        fresh = [a for a, h in zip(run, held, strict=True) if h is None]
        if fresh:
            logs.attempt_events("claimed", [self._fields(a) for a in fresh])
            if self.aio is None:
                for a in fresh:
                    self.todo.put(a)
            else:
                self._dispatch(fresh)
        if len(fresh) < len(run):
            for a, h in zip(run, held, strict=True):
                if h is not None:
                    self._claimed_again(conn, a, h)
        return result

    def _dispatch(self, fresh: list[Attempt]) -> None:
        """Hand fresh attempts to the event loop (async jobs) or the handler threads."""
        assert self.aio is not None
        aio = [a for a in fresh if a.job in self.async_jobs]
        if aio:
            self.n_async += len(aio)
            self.aio.submit(aio)
        if len(aio) < len(fresh):
            for a in fresh:
                if a.job not in self.async_jobs:
                    self.todo.put(a)

    def _claimed_again(self, conn: psycopg.Connection[Any], a: Attempt, held: Attempt) -> None:
        """This worker claimed `a` while it still holds `held`, the same attempt of the same run:
        the database lost the commit of `held`'s claim (a failover to an asynchronous replica, a
        restore), so the run was due again and the attempt number given again. Its handler is not
        started a second time: `held` covers the new claim, whose lease it now renews. Were `held`
        given up already (fenced), the run is handed back to be claimed under a new number."""
        with self.lock:
            covered = held.state != "fenced"
            if held.state == "running":
                held.lease_deadline_mono = max(held.lease_deadline_mono, a.lease_deadline_mono)
        if covered:
            # The row keeps the running attempt's start and trace ids (its history names the span
            # that is exported); bookkeeping only: a database error leaves the new claim's.
            with contextlib.suppress(psycopg.Error):
                conn.execute(
                    q("run_restamp"),
                    {
                        "started_at": held.started_at,
                        "trace_id": held.trace_id,
                        "span_id": held.span_id,
                        "name": held.schedule,
                        "slot": held.slot,
                        "attempt": held.attempt,
                        "worker": self.settings.worker_id,
                    },
                )
            self._log("claimed_again", held, error="the run's claim was lost: the running attempt goes on")
        else:
            why = "claimed again after its claim was lost, while this worker had given it up"
            a.state = "recorded"
            self.to_record.append((a, handed_back(why)))
            self._log("claimed_again", a, error=f"handed back: {why}")

    def _before_lost(self, conn: psycopg.Connection[Any], a: Attempt) -> tuple[str, str] | None:
        """When tracing, the ids of the attempt before the lost one of reclaimed `a` (from the run's
        history), if there was one. A tracing link only: a database error leaves it out."""
        if not telemetry.enabled() or a.attempt < 3:
            return None
        try:
            rows = conn.execute(q("attempt_list"), {"name": a.schedule, "slot": a.slot}).fetchall()
        except psycopg.Error:
            return None
        before = [(r["trace_id"], r["span_id"]) for r in rows if r["attempt"] == a.attempt - 2]
        return before[0] if before and all(before[0]) else None

    def _collect(self) -> None:
        returned: list[Attempt] = []
        get = self.done.get_nowait
        while True:
            try:
                returned.append(get())
            except queue.Empty:
                break
        if not returned:
            return
        rest: list[Attempt] = []
        with self.lock:
            for a in returned:
                self.inflight.pop(a.ident, None)
                if a.state == "running" and a.verdict[0] == "done":
                    a.state = "recorded"  # a success, nearly every attempt: `_record` in short
                    result = a.verdict[2]
                    self.to_record.append(
                        (a, DONE if result is None else Outcome("done", "done", result=result))
                    )
                else:
                    rest.append(a)
        if self.aio is not None:
            self.n_async = sum(1 for a in self.inflight.values() if a.job in self.async_jobs)
        for a in rest:
            self.cancelling.pop(a.ident, None)
            verdict, error, _ = a.verdict
            if a.state == "running" and verdict == "cancelled" and time.monotonic() > a.lease_deadline_mono:
                self.fence(a, LEASE_RAN_OUT)
            if a.state == "running":
                if verdict == "cancelled":
                    verdict = "failed"  # the handler gave up by itself
                self._record(a, decide(a, verdict, error))
            elif a.state == "fenced":
                self._log("cancelled", a, outcome="fenced", error="result not recorded: the lease was lost")

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for a in self.running_attempts():
            deadline = a.deadline_mono()
            if (
                deadline is not None
                and a.timeout is not None  # it has a deadline: it has a timeout
                and now >= deadline
                and not a.returned
                and self._record(a, decide(a, "timeout", f"timed out after {format_duration(a.timeout)}"))
            ):
                self.cancelling[a.ident] = (a, now)
                a.cancel.set()

    def _check_abandoned(self) -> None:
        """Abandon the handlers still running `abandon_after_s` after they were asked to stop.

        A thread cannot be stopped from outside: a handler that ignores its cancellation keeps its
        thread (or blocks the event loop) for good, and the worker's capacity with it. Its outcome
        is already decided (timed out, or not ours to write once the lease was lost); the worker
        stops claiming, lets its other runs finish or hands them back, and exits non-zero so that
        its supervisor starts a fresh process (a hard time limit, as Celery's).
        """
        now = time.monotonic()
        late = [
            (a, asked)
            for a, asked in list(self.cancelling.values())  # other threads fence attempts meanwhile
            if not a.returned and now >= asked + self.settings.abandon_after_s
        ]
        if not late:
            return
        with self.lock:
            for a, _ in late:
                self.inflight.pop(a.ident, None)
                self.cancelling.pop(a.ident, None)
        if self.aio is not None:
            self.n_async = sum(1 for a in self.inflight.values() if a.job in self.async_jobs)
        for a, asked in late:
            self.abandoned.append(a)
            where = "the event loop" if a.job in self.async_jobs else "its thread"
            self._log(
                "abandoned",
                a,
                outcome="abandoned",
                error=f"the handler was still running {now - asked:.1f} s after it was asked to stop"
                f" (--abandon-after {self.settings.abandon_after_s:g}); {where} is given up",
            )
        if not self.exit_code:
            self.exit_code = EXIT_ABANDONED
            self._grace_end("a handler was abandoned: the worker exits to be restarted")
            self.stop.set()

    def _flush(self, conn: psycopg.Connection[Any]) -> None:
        """Record the outcomes decided so far, without claiming."""
        if not self.to_record:
            return
        batch, self.to_record = self.to_record, []
        try:
            batch, cur = send_finish(conn, batch, worker_id=self.settings.worker_id)
            written = finish_result(cur.fetchall())
        except psycopg.Error:
            self.to_record = batch + self.to_record
            raise
        self._report(batch, written)

    def _report(self, batch: list[tuple[Attempt, Outcome]], written: set[int]) -> None:
        """Log (and trace) the outcomes of `batch`; `written` holds the places (from 1) of those the
        finish statement wrote."""
        now = time.monotonic()
        tracing = telemetry.enabled()
        done: list[logs.Fields] = []  # plain successes: their lines are written together
        done_ms: list[float] = []
        for i, (a, o) in enumerate(batch, 1):
            # Milliseconds to the microsecond (round(x, 3) costs more).
            duration_ms = round((now - a.started_mono) * 1e6) / 1000
            if i not in written:
                self.counts["fenced"] += 1
                self._log(
                    "fenced",
                    a,
                    outcome=o.outcome,
                    duration_ms=duration_ms,
                    error="not recorded: another worker holds this run now",
                )
                continue
            if tracing:
                spans.attempt_recorded(a, o.outcome, o.error)
            if o.status == "done":
                self.counts["done"] += 1
                if o.outcome == "done" and o.error is None:
                    done.append(self._fields(a))
                    done_ms.append(duration_ms)
                else:
                    self._log("finished", a, outcome=o.outcome, duration_ms=duration_ms, error=o.error)
                continue
            name = (
                "dead" if o.status == "dead" else "handed_back" if o.outcome == "handed_back" else "retried"
            )
            self.counts["failed" if name == "retried" else name] += 1
            self._log(
                name,
                a,
                outcome=o.outcome,
                duration_ms=duration_ms,
                error=o.error,
                retry_in_s=round(o.delay_s, 3) if o.status == "pending" else None,
            )
        if done:
            logs.attempt_events("finished", done, "done", done_ms)

    def _log(
        self,
        name: str,
        a: Attempt,
        outcome: str | None = None,
        duration_ms: float | None = None,
        error: str | None = None,
        **fields: Any,
    ) -> None:
        """One line about attempt `a`: its identity, then outcome, duration_ms, error and `fields`."""
        if fields:
            logs.event(name, self._fields(a), outcome=outcome, duration_ms=duration_ms, error=error, **fields)
        else:
            logs.attempt_event(name, self._fields(a), outcome, duration_ms, error)

    def _fields(self, a: Attempt) -> logs.Fields:
        """The identity every log line of attempt `a` carries, made once."""
        f = a.log_fields
        if f is None:
            f = a.log_fields = logs.Fields.of(
                {
                    "schedule": a.schedule,
                    "slot": a.slot,
                    "attempt": a.attempt,
                    "worker_id": self.settings.worker_id,
                    "job": a.job,
                    "trace_id": a.trace_id,
                    "span_id": a.span_id,
                }
            )
        return f

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        serve_here()
        logs.event(
            "worker_started",
            worker_id=s.worker_id,
            jobs=self.jobs,
            database=redact(self.url),
            lease_s=s.lease_s,
            heartbeat_s=s.heartbeat_s,
            poll_s=s.poll_s,
            concurrency=s.concurrency,
        )
        self.pool = make_pool(
            self.url, f"fleet-worker {s.worker_id}", min_size=2, max_size=2, prepare=s.prepared_statements
        )
        if not self._wait_for_database():
            self.pool.close()
            logs.event("worker_stopped", worker_id=s.worker_id, **self.counts)
            return 0
        self._say_declared_drift()
        heartbeat = Heartbeat(self, self.pool, self.fence)
        watch = LeaseWatch(self, self.fence)
        listener = Listener(self.url, f"fleet-worker {s.worker_id} listen", self.wake)
        self.threads = [
            threading.Thread(target=self._executor, name=f"fleet-job-{i}", daemon=True)
            for i in range(s.concurrency if self.sync_jobs else 0)
        ]
        if self.async_jobs:
            self.aio = EventLoop(self.handlers, s.worker_id, self._may_start, self._returned, self.look)
            self.threads.append(self.aio)
        for t in [*self.threads, heartbeat, watch, listener]:
            t.start()
        try:
            self._loop()
        finally:
            if killed := command_jobs.kill_running():
                logs.event("commands_killed", worker_id=s.worker_id, commands=killed)
            heartbeat.halt.set()
            watch.halt.set()
            listener.halt.set()
            if self.aio is not None:
                self.aio.halt()
            for _ in range(s.concurrency if self.sync_jobs else 0):
                self.todo.put(None)
            try:
                with self.pool.connection(timeout=_BORROW_S) as conn:
                    process_remove(conn, s.worker_id)
            except Exception:  # noqa: BLE001 - the row ages out anyway
                pass
            self.pool.close()
            self.look.close()
            telemetry.flush()
            logs.event(
                "worker_stopped",
                worker_id=s.worker_id,
                **self.counts,
                **({"abandoned": len(self.abandoned), "exit_code": self.exit_code} if self.exit_code else {}),
            )
        return self.exit_code

    def _unavailable(self, e: Exception, event: str = "db_unavailable") -> None:
        """One line (when the trouble starts, then every 30 s): where the database is and why it
        cannot be used (connection refused, the schema missing, ...)."""
        if self._unavailable_log.due():
            logs.event(event, worker_id=self.settings.worker_id, error=unavailable(e, self.pool))

    def _wait_for_database(self) -> bool:
        """Register this worker, retrying while the database cannot be reached (a process manager
        gives up on a program that exits quickly). False when asked to stop before it could."""
        assert self.pool is not None
        while not self.stop.is_set():
            try:
                with self.pool.connection(timeout=_BORROW_S) as conn:
                    check_schema(conn)
                    process_register(conn, self.settings.worker_id, "worker", self.jobs)
                self._unavailable_log.reset()
                return True
            except PoolTimeout as e:
                self._unavailable(e)
            except (psycopg.OperationalError, SchemaOutdated) as e:  # not migrated yet, server restarting
                self._unavailable(e, "db_error" if isinstance(e, SchemaOutdated) else "db_unavailable")
                self.stop.wait(_BORROW_S)
            except Exception as e:  # noqa: BLE001 - retry whatever went wrong
                self._unavailable(e, "db_error")
                self.stop.wait(_BORROW_S)
        return False

    def _say_declared_drift(self) -> None:
        """Once, at start: the schedules the app's code declares that the database holds otherwise
        (they run as stored until applied). Never a reason not to serve."""
        assert self.pool is not None
        try:
            with self.pool.connection(timeout=_BORROW_S) as conn:
                drift = declared_drift(conn, declared(), self.settings.app)
        except Exception as e:  # noqa: BLE001 - a check, never a reason to stop
            logs.event("db_error", worker_id=self.settings.worker_id, error=describe(e))
            return
        if drift is not None:
            logs.event("declared_schedules_differ", worker_id=self.settings.worker_id, **drift)

    def _loop(self) -> None:
        assert self.pool is not None
        while True:
            try:
                # One connection for the whole loop; the pool checks it again only after an error.
                with self.pool.connection(timeout=_BORROW_S) as conn:
                    self._unavailable_log.reset()
                    self._rounds(conn)
                    return
            except psycopg.Error as e:
                self._erred = True
                # Prepared statements broken by a proxy are said once (the connection borrowed
                # next prepares nothing); other errors when they start and every 30 s.
                broke = prepared_statements_broke(e, worker_id=self.settings.worker_id)
                if not broke and self._error_log.due():
                    logs.event("db_error", worker_id=self.settings.worker_id, error=describe(e))
                if broke and not self._retried_unprepared:
                    self._retried_unprepared = True  # the next connection prepares nothing: at once
                elif not self.stop.is_set():
                    self.wake.wait(_BORROW_S)
            except PoolTimeout as e:
                self._unavailable(e)
            except Exception as e:  # noqa: BLE001 - one round that fails never ends the claim loop
                # A claim it rolled back is claimable again; runs it claimed but did not start are
                # taken over when their leases end, as after a crash, but the worker serves on.
                self._erred = True
                if self._error_log.due():
                    logs.event("worker_error", worker_id=self.settings.worker_id, error=logs.error_text(e))
                if not self.stop.is_set():
                    self.wake.wait(_BORROW_S)
            if self._stopping_without_database():
                return

    def force(self) -> None:
        """Stop now (a second Ctrl-C): the grace period is over, unfinished runs are handed back at
        once and cancelled handlers are not waited for. Safe to call from any thread."""
        self.forced = True
        self.exit_code = EXIT_FORCED
        self._grace_end_mono = time.monotonic()
        self.stop.set()
        self.wake.set()

    def _grace_end(self, why: str | None = None) -> float:
        """When running handlers must have finished, from the first look after a stop request."""
        if self._grace_end_mono is None:
            s = self.settings
            self._grace_end_mono = time.monotonic() + s.grace_s
            reason = {"reason": why} if why else {}
            logs.event(
                "stopping", worker_id=s.worker_id, running=len(self.inflight), grace_s=s.grace_s, **reason
            )
        return self._grace_end_mono

    def _stopping_without_database(self) -> bool:
        """Asked to stop while the database is out of reach: True once nothing is left to record, or
        the grace period is over (the runs still held are then retaken when their leases run out)."""
        if not self.stop.is_set():
            return False
        self._collect()
        if self.inflight or self.to_record:
            if time.monotonic() < self._grace_end():
                return False
            held = {*(a.key for a in self.inflight.values()), *(a.key for a, _ in self.to_record)}
            logs.event("stopped_without_database", worker_id=self.settings.worker_id, left_to_lease=len(held))
        return True

    def _rounds(self, conn: psycopg.Connection[Any]) -> None:
        s = self.settings
        target = min(s.concurrency, s.claim_batch)
        while True:
            self.wake.clear()
            if target > 1 and self.inflight and self.aio is None and not self.stop.is_set():
                # Fast handlers free their slots a few at a time: let a round gather at least half a
                # batch (for a moment at most) so the fixed cost of a round is shared by many runs.
                free = s.concurrency - len(self.inflight) + self.done.qsize()
                if 0 < free < target // 2:
                    time.sleep(_GATHER_S)
            with logs.batched():
                r = self.run_once(conn)
            if self._erred:  # a round went through: the next error is news again
                self._erred = False
                self._error_log.reset()
            if self.stop.is_set():
                grace_end = self._grace_end()
                if not self.inflight and not self.to_record:
                    return
                if time.monotonic() >= grace_end:
                    self._hand_back(conn)
                    return
                self.wake.wait(_STOP_POLL_S)
                continue
            if self.to_record or r.full:
                continue  # outcomes to record, or a full batch: there may be more right away
            timeout = self._next_wait(conn, r)
            if timeout is None:
                return
            self.wake.wait(timeout)

    def _next_wait(self, conn: psycopg.Connection[Any], r: WorkerResult) -> float | None:
        """How long to sleep before the next round; None when an until-idle worker is done."""
        s = self.settings
        timeout = s.poll_s
        # With room left, sleep no later than the next run comes due: a run created ahead of its
        # time was announced long before (its NOTIFY woke us then), and nothing else wakes us at it.
        if r.requested and not r.full:
            jobs = self.jobs if self.aio is None else self._looked_for
            with conn.pipeline():  # one implicit transaction: the round's planner settings hold
                conn.execute(q("round_configure"))
                cur = conn.execute(q("run_next_wait"), {"jobs": jobs, "now": None})
            row = cur.fetchone()
            wait = row["wait_s"] if row else None
            if s.until_idle and not self.inflight and not self.to_record and (wait is None or wait > 0):
                return None
            if wait is not None and wait > 0:
                timeout = min(timeout, wait)
        now = time.monotonic()
        for a in self.running_attempts():
            d = a.deadline_mono()
            if d is not None:
                timeout = min(timeout, max(0.0, d - now))
        for _, asked in list(self.cancelling.values()):
            timeout = min(timeout, max(0.0, asked + s.abandon_after_s - now))
        return timeout

    def _hand_back(self, conn: psycopg.Connection[Any]) -> None:
        """Give unfinished runs back so another worker retakes them at once.

        A handler that has already returned is recorded with its real outcome instead: handing its
        run back would make another worker run it a second time.
        """
        self._collect()
        with self.lock:
            leaving = [a for a in self.inflight.values() if a.state == "running" and not a.returned]
            for a in leaving:
                a.state = "recorded"
        for a in leaving:
            self.to_record.append((a, handed_back()))
            a.cancel.set()
        self._collect()
        self._flush(conn)
        # Give cancelled handlers a moment to stop (a command job is terminated by its thread),
        # unless the stop is forced: then the process ends at once, and them with it.
        end = time.monotonic() + (0.0 if self.forced else _HANDBACK_WAIT_S)
        while self.inflight and time.monotonic() < end:
            self.wake.wait(_STOP_POLL_S)
            self.wake.clear()
            self._collect()
