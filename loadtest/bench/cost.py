"""Where a run's CPU goes: one worker draining no-op runs in this process, its rounds timed part by
part, and the server's share of each statement read from the backend serving it.

The worker (fleet.worker.loop.Worker with its handler threads, the drain's flags) drains a backlog
on one connection, round after round as its loop does; the CPU time of this process's threads
is split into the round's statements on the client (encoding the finish, decoding the claim), the
log lines, handing runs to the handler threads and running them there (dispatch), and the rest of
the loop's bookkeeping. Then the claim and the finish are sent on their own, batch after batch, and
the CPU time of the backend serving them is read from /proc (the server must run on this
machine): the claim, the finish, and within the finish the attempt row (its share of the finish's
execution time, from EXPLAIN ANALYZE), and the notifications the finishes sent."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

import fleet.worker.loop as worker_loop
from fleet.jobs import Handler
from fleet.observe import logs
from fleet.process.settings import WorkerSettings
from fleet.store.db import connect
from fleet.store.queries import q
from fleet.worker.claim import claim_result, send_claim
from fleet.worker.finish import DONE, finish_params, finish_result, send_finish
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.config import BATCH, Bench
from loadtest.bench.report import Report, median
from loadtest.bench.server import serves_locally

RUNS = 50_000
RUNS_QUICK = 5_000


def noop(ctx: Any) -> None:
    """The drain's no-op handler."""


def backend_cpu_ns(pid: int) -> int:
    """CPU time the server process `pid` has run, in nanoseconds (scheduler statistics)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class Clock:
    """CPU time of the calling thread spent inside the wrapped functions, by part."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = {}

    def wrap(self, part: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return f(*args, **kw)
            finally:
                self.ns[part] = self.ns.get(part, 0) + time.thread_time_ns() - t0

        return timed


@contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def worker_parts(url: str, n: int) -> dict[str, float]:
    """Microseconds of this process's CPU per run, by part, while a Worker drains `n` runs."""
    with connect(url, "fleet-bench cost") as conn:
        reset_runs(conn)
        insert_runs(conn, n)
        conn.execute("VACUUM ANALYZE fleet.job_runs")
    settings = WorkerSettings(
        database_url=url, app=(), jobs_file=None, worker_id="cost", lease_s=60.0, heartbeat_s=20.0,
        poll_s=5.0, concurrency=BATCH, claim_batch=BATCH, grace_s=5.0, until_idle=True, log_format="json",
    )  # fmt: skip
    handlers: dict[str, Handler] = {"bench.noop": noop}
    w = worker_loop.Worker(settings, handlers)
    clock = Clock()
    threads = [threading.Thread(target=w._executor, daemon=True) for _ in range(settings.concurrency)]
    for t in threads:
        t.start()
    sink = io.BytesIO()
    logs.configure("json", sink, process="worker")
    done = 0
    try:
        with (
            connect(url, "fleet-bench cost worker", prepare=True) as conn,
            patched(worker_loop, "run_round", clock.wrap("statements", worker_loop.run_round)),
            patched(logs, "attempt_events", clock.wrap("logs", logs.attempt_events)),
        ):
            main0, proc0 = time.thread_time_ns(), time.process_time_ns()
            while done < n:
                w.wake.clear()
                with logs.batched():
                    r = w.run_once(conn)
                done += r.recorded
                if not r.claimed and not r.recorded:
                    w.wake.wait(0.001)
            main, proc = time.thread_time_ns() - main0, time.process_time_ns() - proc0
    finally:
        logs.configure("json", None)
        for _ in threads:
            w.todo.put(None)
        for t in threads:
            t.join(5)
    statements = clock.ns.get("statements", 0)
    log_ns = clock.ns.get("logs", 0)
    return {
        "statements": statements / n / 1000,
        "logs": log_ns / n / 1000,
        "loop": (main - statements - log_ns) / n / 1000,
        "dispatch": (proc - main) / n / 1000,
        "total": proc / n / 1000,
    }


def server_parts(url: str, n: int) -> dict[str, float]:
    """Microseconds of the server's CPU per run for the claim and the finish sent on their own, the
    attempt row's share of the finish, and notifications sent per run."""
    with connect(url, "fleet-bench cost") as conn:
        reset_runs(conn)
        insert_runs(conn, n)
        conn.execute("VACUUM ANALYZE fleet.job_runs")
    claim_ns = finish_ns = 0
    woke = 0
    history = execution = 0.0
    with connect(url, "fleet-bench cost server", prepare=True) as conn:
        row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert row is not None
        pid = int(row["pid"])
        for i in range(n // BATCH):
            t0 = backend_cpu_ns(pid)
            with conn.pipeline():
                conn.execute(q("round_configure"))
                cur = send_claim(conn, worker_id="cost", jobs=["bench.noop"], limit=BATCH, lease_s=60.0)
            attempts, _ = claim_result(cur.fetchall())
            claim_ns += backend_cpu_ns(pid) - t0
            batch = [(a, DONE) for a in attempts]
            if i % 10 == 5:  # every tenth batch: the finish's plan with times, for the attempt row's share
                history_ms, total_ms = _finish_split(conn, batch)
                history += history_ms
                execution += total_ms
                continue  # finished by the EXPLAIN ANALYZE, not counted
            t1 = backend_cpu_ns(pid)
            with conn.pipeline():
                conn.execute(q("round_configure"))
                _, fin = send_finish(conn, batch, worker_id="cost")
            rows = fin.fetchall()
            t2 = backend_cpu_ns(pid)
            assert len(finish_result(rows)) == len(batch)
            woke += sum(1 for r in rows if r[1])
            finish_ns += t2 - t1
    counted = n - (n // BATCH // 10) * BATCH
    finish_us = finish_ns / counted / 1000
    share = history / execution if execution else 0.0
    return {
        "claim": claim_ns / n / 1000,
        "finish": finish_us * (1 - share),
        "attempt_row": finish_us * share,
        "notify": woke / counted,
    }


def _finish_split(conn: psycopg.Connection[Any], batch: list[Any]) -> tuple[float, float]:
    """The finish of `batch` under EXPLAIN ANALYZE: (ms in the attempt rows' insert, ms in all)."""
    with conn.transaction():
        conn.execute(q("round_configure"))
        params = finish_params(batch, [], worker_id="cost")
        lines = [
            r["QUERY PLAN"]
            for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + q("run_finish"), params).fetchall()
        ]
    history_ms = total_ms = 0.0
    for i, line in enumerate(lines):
        if line.strip().startswith("CTE history"):
            history_ms = _actual_ms(lines[i + 1])
        if line.startswith("Execution Time:"):
            total_ms = float(line.split()[2])
    return history_ms, total_ms


def _actual_ms(line: str) -> float:
    """The total time of a plan node's line ('actual time=0.1..0.3 rows=...'): 0.3."""
    return float(line.split("actual time=")[1].split("..")[1].split()[0])


def run(bench: Bench, report: Report) -> None:
    n = RUNS_QUICK if bench.opts.quick else RUNS
    url = bench.server.database("cost")
    with connect(url, "fleet-bench") as conn:
        add_schedule(conn)
    trials = [worker_parts(url, n) for _ in range(bench.opts.repeat)]
    labels = {
        "statements": "the round's statements on the worker: encoding the finish, decoding the claim",
        "logs": "the attempt's log lines (claimed, finished)",
        "loop": "the loop's bookkeeping: collecting returned handlers, runs in flight, outcomes",
        "dispatch": "handler dispatch: a handler thread takes the run, makes its context, runs it, hands it back",
        "total": "the worker in all (this process's CPU)",
    }
    for part, label in labels.items():
        values = [t[part] for t in trials]
        report.add(
            f"cost.worker.{part}", f"worker CPU per run: {label}", median(values), "us/run", trials=values
        )
    if serves_locally(bench.server.url):
        server = [server_parts(url, n) for _ in range(bench.opts.repeat)]
        slabels = {
            "claim": "the claim (run_claim)",
            "finish": "the finish's update of the run (run_finish without its attempt row)",
            "attempt_row": "the attempt row (run_finish's insert into job_attempts)",
        }
        for part, label in slabels.items():
            values = [t[part] for t in server]
            report.add(
                f"cost.server.{part}", f"server CPU per run: {label}", median(values), "us/run", trials=values
            )
        values = [t["notify"] for t in server]
        report.add(
            "cost.server.notify",
            "notifications sent per run by the finish (a drain)",
            median(values),
            "per run",
        )
    report.note(
        f"cost: {n:,} no-op runs drained in the benchmark's own process by fleet.worker.loop.Worker "
        f"(--concurrency {BATCH} --claim-batch {BATCH}, {BATCH} handler threads, log lines to memory), on one "
        "connection with prepared statements as a worker's; CPU time per run from the threads' clocks: "
        "the round's statements on the client, the log lines, the rest of the loop (main thread), and "
        "dispatch (every other thread of the process: the handler threads). The server's share: the claim "
        f"and the finish of {BATCH} runs sent on their own, batch after batch, timed by the CPU of the backend "
        "serving them (/proc/PID/schedstat; only when the server runs on this machine), the attempt row's "
        "share of the finish from EXPLAIN ANALYZE of every tenth finish"
    )
