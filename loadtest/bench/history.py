"""The drain with millions of finished runs already in job_runs, against an empty table: the claim
path reads only unfinished rows (partial indexes), so history should cost (almost) nothing."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from fleet.db import connect
from loadtest.bench.backlog import add_schedule, insert_history
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
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        checkpoint(conn)
        built_s = time.monotonic() - t0
        size = conn.execute("SELECT pg_total_relation_size('fleet.job_runs') AS b").fetchone()
    print(
        f"  history: {rows:,} finished rows in {built_s:.0f}s, job_runs {int(size['b']) / 2**20:,.0f} MiB"
        if size
        else ""
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
        f"history: {rows:,} finished runs bulk-inserted (generate_series) into fleet.job_runs, then VACUUM "
        "ANALYZE; each trial deletes the previous trial's runs and runs VACUUM ANALYZE on both databases "
        f"alike, then drains a backlog of {n:,} with {WORKERS} workers, as it arrives (not vacuumed after "
        "loading); the two databases' trials are interleaved"
    )
    report.ratio(
        "history.ratio",
        f"drain with {rows:,} finished rows / empty",
        "history.history",
        "history.empty",
        target=">= 0.9",
        ok=lambda r: r >= 0.9,
    )
