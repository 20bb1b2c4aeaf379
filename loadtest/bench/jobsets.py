"""Workers whose claims must not read other jobs' runs: one worker draining a backlog of no-op runs
(a) alone on an empty table with only sync jobs registered, (b) with an `async def` job registered
too, whose claims find nothing, and (c) beside another pool's backlog of runs of a job it does not
run. (b) and (c) should drain within 10% of (a)."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from fleet.store.db import connect
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.config import Bench
from loadtest.bench.drain import OPEN_RUNS, FleetDrain
from loadtest.bench.report import Report, median
from loadtest.bench.server import checkpoint
from loadtest.bench.trial import Trial

WORKERS = 1
OTHER_JOB = "bench.other"  # a job no worker of the benchmark registers: another pool's
OTHER_BACKLOG = 1_000_000
OTHER_BACKLOG_QUICK = 50_000
OWN_OPEN = (
    "SELECT EXISTS (SELECT 1 FROM fleet.job_runs WHERE status IN ('pending', 'running') "
    "AND job = 'bench.noop') AS open"
)


def reset_keeping_other(conn: psycopg.Connection[Any]) -> None:
    """Remove the previous trial's runs, not the other pool's backlog."""
    conn.execute("DELETE FROM fleet.job_attempts")
    conn.execute("DELETE FROM fleet.job_runs WHERE schedule_name = 'bench'")
    conn.execute("DELETE FROM fleet.processes")
    conn.execute("VACUUM ANALYZE fleet.job_runs")
    conn.execute("VACUUM ANALYZE fleet.job_attempts")


def run(bench: Bench, report: Report) -> None:
    other = OTHER_BACKLOG_QUICK if bench.opts.quick else OTHER_BACKLOG
    empty = bench.server.database("jobsets_empty")
    beside = bench.server.database("jobsets_beside")
    for url in (empty, beside):
        with connect(url, "fleet-bench") as conn:
            add_schedule(conn)
            add_schedule(conn, "other", job=OTHER_JOB)
    with connect(beside, "fleet-bench") as conn:
        t0 = time.monotonic()
        insert_runs(conn, other, schedule="other", job=OTHER_JOB)
        conn.commit()
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        checkpoint(conn)
    print(f"  jobsets: {other:,} runs of {OTHER_JOB} inserted in {time.monotonic() - t0:.0f}s", flush=True)
    contenders = [
        FleetDrain(empty, WORKERS, key="single", reset=reset_runs, label="sync jobs only, empty table"),
        FleetDrain(
            empty,
            WORKERS,
            key="mixed",
            reset=reset_runs,
            app="loadtest.bench.mixed_jobs",
            still_open=OPEN_RUNS,
            label="sync and async jobs registered, a backlog of sync runs only",
        ),
        FleetDrain(
            beside,
            WORKERS,
            key="beside",
            reset=reset_keeping_other,
            still_open=OWN_OPEN,
            label=f"beside another pool's backlog of {other:,} runs of a job it does not run",
        ),
    ]
    n = bench.opts.backlog
    trials: dict[str, list[Trial]] = {c.key: [] for c in contenders}
    for rep in range(bench.opts.repeat):
        for c in contenders:
            t = c.trial(bench, n)
            trials[c.key].append(t)
            print(f"  jobsets {c.key} #{rep + 1}: {t.rate:,.0f} runs/s", flush=True)
    for c in contenders:
        rates = [t.rate for t in trials[c.key]]
        report.add(
            f"jobsets.{c.key}",
            f"drain {n:,} no-op runs, {WORKERS} worker, {c.label}",
            median(rates),
            "runs/s",
            trials=rates,
        )
    for key, what in (("mixed", "sync and async jobs"), ("beside", f"beside {other:,} runs of another pool")):
        report.ratio(
            f"jobsets.{key}.ratio",
            f"drain, {what} / sync jobs only on an empty table (within 10%)",
            f"jobsets.{key}",
            "jobsets.single",
            target=">= 0.9",
            ok=lambda r: r >= 0.9,
        )
    report.note(
        f"jobsets: one fleet-worker (the drain's flags) drains {n:,} no-op runs (bench.noop), the three "
        "cases' trials interleaved: `single` registers sync jobs only (loadtest.bench.jobs) on a table "
        "holding nothing else; `mixed` registers an `async def` job too (loadtest.bench.mixed_jobs), so "
        "each round also claims for it and finds nothing; `beside` registers sync jobs only, on a table "
        f"also holding {other:,} due pending runs of {OTHER_JOB}, a job of another pool that is not "
        "running (its backlog stays). Each trial's backlog is loaded as the drain's, then vacuumed and "
        "analysed with the table"
    )
