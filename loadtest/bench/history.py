"""The drain with millions of finished runs already in job_runs, against an empty table: the claim
path reads only unfinished rows (partial indexes), so history should cost (almost) nothing."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from fleet.store.db import connect
from loadtest.bench.backlog import HISTORY_BATCH, add_schedule, insert_history
from loadtest.bench.config import Bench
from loadtest.bench.drain import FleetDrain
from loadtest.bench.report import Report, median
from loadtest.bench.server import checkpoint
from loadtest.bench.trial import Trial

WORKERS = 2


def reset_keeping_history(conn: psycopg.Connection[Any]) -> None:
    """Remove the previous trial's runs but not the history (the same steps on both databases)."""
    conn.execute("DELETE FROM fleet.job_attempts")
    conn.execute("DELETE FROM fleet.job_runs WHERE schedule_name = 'bench'")
    conn.execute("DELETE FROM fleet.processes")
    conn.execute("VACUUM ANALYZE fleet.job_runs")
    conn.execute("VACUUM ANALYZE fleet.job_attempts")


def run(bench: Bench, report: Report) -> None:
    rows = bench.opts.history_rows
    empty = bench.server.database("history_empty")
    full = bench.server.database("history_full")
    for url in (empty, full):
        with connect(url, "fleet-bench") as conn:
            add_schedule(conn)
            add_schedule(conn, "history")
    with connect(full, "fleet-bench") as conn:
        t0 = time.monotonic()
        insert_history(conn, rows)
        t1 = time.monotonic()
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        checkpoint(conn)
        t2 = time.monotonic()
        row = conn.execute("SELECT pg_total_relation_size('fleet.job_runs') AS b").fetchone()
        size_mib = int(row["b"]) / 2**20 if row else 0.0
    print(
        f"  history: {rows:,} finished rows inserted in {t1 - t0:.0f}s, vacuumed, analysed and "
        f"checkpointed in {t2 - t1:.0f}s; job_runs {size_mib:,.0f} MiB with its indexes",
        flush=True,
    )
    report.add(
        "history.fill",
        f"filling job_runs with {rows:,} finished runs, vacuumed, analysed, checkpointed",
        t2 - t0,
        "s",
        note=f"inserting {t1 - t0:.0f} s, VACUUM ANALYZE and CHECKPOINT {t2 - t1:.0f} s; {size_mib:,.0f} MiB",
    )
    contenders = [
        # Backlogs as they arrive (not vacuumed after loading): this compares fleet with itself.
        FleetDrain(empty, WORKERS, key="empty", reset=reset_keeping_history, vacuum=()),
        FleetDrain(full, WORKERS, key="history", reset=reset_keeping_history, vacuum=()),
    ]
    n = bench.opts.backlog
    trials: dict[str, list[Trial]] = {c.key: [] for c in contenders}
    for rep in range(bench.opts.repeat):
        for c in contenders:
            t = c.trial(bench, n)
            trials[c.key].append(t)
            print(f"  history {c.key} #{rep + 1}: {t.rate:,.0f} runs/s", flush=True)
    for c in contenders:
        what = "empty job_runs" if c.key == "empty" else f"{rows:,} finished rows in job_runs"
        rates = [t.rate for t in trials[c.key]]
        report.add(
            f"history.{c.key}",
            f"drain {n:,} no-op runs, {WORKERS} workers, {what}",
            median(rates),
            "runs/s",
            trials=rates,
        )
    report.note(
        f"history: {rows:,} finished runs bulk-inserted into fleet.job_runs by the server (generate_series, "
        f"{HISTORY_BATCH:,} rows per INSERT and transaction, the indexes kept up, the per-row foreign-key "
        "check skipped as a superuser), then VACUUM ANALYZE and CHECKPOINT (history.fill: the insert, then "
        "those); each trial deletes the previous trial's runs and runs VACUUM ANALYZE on both databases "
        f"alike, then drains a backlog of {n:,} with {WORKERS} workers, as it arrives (not vacuumed after "
        "loading); the two databases' trials are interleaved"
    )
    report.ratio(
        "history.ratio",
        f"drain with {rows:,} finished rows / empty (within 10%)",
        "history.history",
        "history.empty",
        target=">= 0.9",
        ok=lambda r: r >= 0.9,
    )
