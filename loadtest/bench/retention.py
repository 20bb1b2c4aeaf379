"""Built-in retention under load: the claim latency of a steady stream of runs while a ticker's
retention pass deletes a long history of old finished runs, against the same stream without it,
and how many runs the pass removes per second."""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg

from fleet.store.db import connect
from loadtest.bench.backlog import SLOT_BASE, add_schedule, insert_history
from loadtest.bench.config import WORKER_FLAGS, Bench
from loadtest.bench.procs import Proc, env_for, fleet_cmd
from loadtest.bench.report import Report, percentile
from loadtest.bench.server import checkpoint, wait_until

WORKERS = 2
FEED_EVERY_S = 0.02  # a few runs due now, 50 times a second
FEED_RUNS = 4  # so 200 runs/s: a steady claim load, far from the drain's limit
MIN_WINDOW_S = 5.0


def _feed(conn: psycopg.Connection[Any], counter: itertools.count[int]) -> None:
    slots = [next(counter) for _ in range(FEED_RUNS)]
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "SELECT 'bench', %s::timestamptz + make_interval(secs => g), 'bench.noop', 'allow', now() "
        "FROM unnest(%s::int[]) g",
        (SLOT_BASE, slots),
    )
    conn.execute("SELECT pg_notify('fleet_runs', '')")


def _pass_line(p: Proc) -> dict[str, Any] | None:
    for line in p.log.read_text(errors="replace").splitlines():
        if '"retention_pass"' in line:
            rec: dict[str, Any] = orjson.loads(line)
            return rec
    return None


def _phase(bench: Bench, url: str, retention: str, seconds: float | None) -> tuple[list[float], float, Any]:
    """Feed runs to 2 workers with a ticker (its --retention `retention`) until its first pass ends
    (`seconds` None) or for `seconds`; returns the claim latencies (s) of the runs fed meanwhile (while
    the pass ran, with one), the window and the pass's line."""
    env = env_for(url)
    tag = f"retention-{retention}"
    procs = [
        bench.procs.start(
            fleet_cmd("fleet-worker", "--app", "loadtest.bench.jobs", "--id", f"bench-{i}", *WORKER_FLAGS),
            env,
            bench.log(f"{tag}-worker-{i}"),
        )
        for i in range(WORKERS)
    ]
    counter = itertools.count(1 if retention == "off" else 50_000_000)  # slots of one phase apart
    line = None
    try:
        with connect(url, "fleet-bench feed") as conn:
            wait_until(
                lambda: bench.server.listeners(url) >= WORKERS, 60, "the workers", 0.2, bench.procs, procs
            )
            # the window starts when the workers listen, the ticker then: its first pass starts at once
            ticker = bench.procs.start(
                fleet_cmd("fleet-ticker", "--retention", retention), env, bench.log(f"{tag}-ticker")
            )
            procs.append(ticker)
            start = conn.execute("SELECT now() AS t").fetchone()
            assert start is not None
            t0 = time.monotonic()
            while True:
                _feed(conn, counter)
                bench.procs.check(procs)
                elapsed = time.monotonic() - t0
                if seconds is None:
                    line = _pass_line(ticker)
                    if line is not None and elapsed >= MIN_WINDOW_S:
                        break
                elif elapsed >= seconds:
                    break
                time.sleep(FEED_EVERY_S)
            window = time.monotonic() - t0
            wait_until(
                lambda: (
                    not conn.execute(
                        "SELECT 1 FROM fleet.job_runs WHERE status IN ('pending', 'running') LIMIT 1"
                    ).fetchone()
                ),
                60,
                "the fed runs to finish",
            )
            # with retention, the runs fed while the pass ran (it logs its end and its duration)
            since, until = start["t"], None
            if line is not None:
                until = datetime.fromisoformat(str(line["ts"]).replace("Z", "+00:00"))
                since = max(since, until - timedelta(seconds=float(line["duration_s"])))
            rows = conn.execute(
                "SELECT extract(epoch FROM started_at - run_after)::float8 AS s FROM fleet.job_runs "
                "WHERE schedule_name = 'bench' AND run_after >= %s"
                " AND (%s::timestamptz IS NULL OR run_after <= %s)",
                (since, until, until),
            ).fetchall()
    finally:
        bench.procs.stop(procs)
    return [r["s"] for r in rows], window, line


def run(bench: Bench, report: Report) -> None:
    rows = bench.opts.retention_rows
    url = bench.server.database("retention")
    with connect(url, "fleet-bench") as conn:
        add_schedule(conn)
        add_schedule(conn, "history")
        t0 = time.monotonic()
        insert_history(conn, rows)  # finished in 2020: every one is past the 30-day default
        conn.execute(
            "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at,"
            " finished_at, outcome) SELECT schedule_name, scheduled_for, 1, 'old', started_at, finished_at,"
            " 'done' FROM fleet.job_runs"
        )
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        conn.execute("VACUUM ANALYZE fleet.job_attempts")
        checkpoint(conn)
    print(f"  retention: {rows:,} old finished runs with their attempts in {time.monotonic() - t0:.0f}s")
    on, window, line = _phase(bench, url, "30d", None)
    removed = int(line["runs"]) if line else 0
    took = float(line["duration_s"]) if line else float("nan")
    print(f"  retention on: {removed:,} runs removed in {took:.1f}s; {len(on):,} runs fed in {window:.0f}s")
    off, _, _ = _phase(bench, url, "off", window)
    print(f"  retention off: {len(off):,} runs fed in {window:.0f}s")
    load = f"{FEED_RUNS / FEED_EVERY_S:.0f} runs/s to {WORKERS} workers"
    report.add(
        "retention.claim_p99.off",
        f"claim latency p99, {load}, no retention ({len(off)} runs)",
        percentile([x * 1000 for x in off], 99),
        "ms",
    )
    report.add(
        "retention.claim_p99.on",
        f"claim latency p99, {load}, during a pass removing {removed:,} runs ({len(on)} runs)",
        percentile([x * 1000 for x in on], 99),
        "ms",
    )
    report.ratio(
        "retention.ratio",
        "claim latency p99 during retention / without",
        "retention.claim_p99.on",
        "retention.claim_p99.off",
        target="<= 1.2",
        ok=lambda r: r <= 1.2,
    )
    report.add(
        "retention.rate",
        f"runs removed per second by the pass ({removed:,} runs with an attempt each)",
        removed / took if took and took == took else float("nan"),
        "runs/s",
    )
    report.note(
        f"retention: {rows:,} done runs finished in 2020, one attempt each, bulk-inserted then VACUUM "
        f"ANALYZE; a fleet-ticker with the default --retention 30d (batch 2,000 per step) starts its "
        f"first pass at once while the benchmark inserts {FEED_RUNS} runs due now every "
        f"{FEED_EVERY_S * 1000:.0f} ms (and notifies) for {WORKERS} workers, until the pass ends (at "
        f"least {MIN_WINDOW_S:.0f} s); then the same stream for the same time with --retention off. "
        "Claim latency is job_runs.started_at - run_after of each run fed while the pass ran (from its "
        "log line's end and duration), and of each run fed in the window without retention"
    )
