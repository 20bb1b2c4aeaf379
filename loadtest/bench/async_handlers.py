"""One fleet-worker process running 1,000 `async def` handlers that each await asyncio.sleep(1): the
time from the first claim to the last finish (about the one second they sleep when the worker runs
them all at once), from the database."""

from __future__ import annotations

from typing import Any

import psycopg

from fleet.store.db import connect
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.config import Bench
from loadtest.bench.procs import Proc, env_for, fleet_cmd
from loadtest.bench.report import Report, median
from loadtest.bench.server import checkpoint
from loadtest.bench.trial import drain_trial

RUNS = 1000
SLEEP_S = 1.0
FLAGS = ("--async-concurrency", str(RUNS), "--claim-batch", "100")
TARGET_S = 2.0
OPEN = "SELECT EXISTS (SELECT 1 FROM fleet.job_runs WHERE status IN ('pending', 'running')) AS open"
# First claim (job_runs.started_at of the earliest attempt) to last finish.
SPAN = (
    "SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at))::float8 AS s "
    "FROM fleet.job_attempts WHERE outcome = 'done'"
)


def run(bench: Bench, report: Report) -> None:
    url = bench.server.database("async")
    with connect(url, "fleet-bench") as conn:
        add_schedule(conn, "async", job="bench.async_sleep", args={"seconds": SLEEP_S})
    spans: list[float] = []
    cpus: list[float] = []
    rss: list[float] = []
    for rep in range(bench.opts.repeat):
        with connect(url, "fleet-bench") as conn:
            reset_runs(conn)
            checkpoint(conn)

        def start() -> list[Proc]:
            cmd = fleet_cmd("fleet-worker", "--app", "loadtest.bench.async_jobs", "--id", "async-0", *FLAGS)
            return [bench.procs.start(cmd, env_for(url), bench.log("async-0"))]

        def load() -> None:
            with connect(url, "fleet-bench load") as conn, conn.transaction():
                _insert(conn)
                conn.execute("SELECT pg_notify('fleet_runs', '')")

        t = drain_trial(
            bench,
            url,
            start=start,
            ready=lambda: bench.server.listeners(url) >= 1,
            load=load,
            tables=("fleet.job_runs",),
            still_open=OPEN,
            measure=SPAN,
            n=RUNS,
        )
        spans.append(t.seconds)
        cpus.append(t.cpu_s)
        rss.append(t.peak_rss_kib / 1024)
        print(f"  async #{rep + 1}: {RUNS:,} handlers in {t.seconds:.2f} s", flush=True)
    label = f"one worker, {RUNS:,} async handlers each awaiting asyncio.sleep({SLEEP_S:g})"
    report.add(
        "async.first_claim_to_last_finish",
        f"{label}: first claim to last finish",
        median(spans),
        "s",
        trials=spans,
        target=f"<= {TARGET_S:g}",
        ok=lambda v: v <= TARGET_S,
    )
    report.add(
        "async.worker_cpu", f"{label}: worker CPU, whole process lifetime", median(cpus), "s", trials=cpus
    )
    report.add("async.peak_rss", f"{label}: worker peak RSS", median(rss), "MiB", trials=rss)
    report.note(
        f"async: one fleet-worker ({' '.join(FLAGS)}) and {RUNS:,} due runs of an `async def` job awaiting "
        f"asyncio.sleep({SLEEP_S:g}), inserted in one transaction while the worker is paused (SIGSTOP), then "
        "resumed; first claim to last finish is max(finished_at) - min(started_at) of job_attempts"
    )


def _insert(conn: psycopg.Connection[Any]) -> None:
    insert_runs(conn, RUNS, schedule="async", job="bench.async_sleep")
    conn.execute("UPDATE fleet.job_runs SET args = jsonb_build_object('seconds', %s::float8)", (SLEEP_S,))
