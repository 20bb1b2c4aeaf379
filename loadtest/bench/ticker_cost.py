"""The ticker's cost: how fast it materialises slots (run_once in-process, 10,000 due schedules), and
the CPU a fleet-ticker process uses for 10,000 schedules due each minute (from /proc/<pid>/stat)."""

from __future__ import annotations

import time

import psycopg

from fleet.admin.apply import apply_specs
from fleet.process.settings import DEFAULT_CATCHUP_LIMIT, DEFAULT_TICK_BATCH
from fleet.store.db import connect
from fleet.ticker.tick import run_once
from fleet.timing.schedfile import load
from loadtest.bench.config import Bench
from loadtest.bench.procs import env_for, fleet_cmd
from loadtest.bench.report import Report, median
from loadtest.bench.server import wait_until


def _runs(conn: psycopg.Connection[dict[str, object]]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM fleet.job_runs").fetchone()
    return int(str(row["n"])) if row else 0


# Ticking through the end of the minute would make the next minute's slots due too: a round that
# would start this close to it waits for the next minute instead.
MINUTE_MARGIN_S = 15.0


def materialise(url: str, margin_s: float = MINUTE_MARGIN_S) -> tuple[int, float]:
    """Make every schedule due once and tick until none is; returns (slots created, seconds). Starts
    in the next minute when fewer than `margin_s` seconds of this one are left."""
    with connect(url, "fleet-bench") as conn:
        row = conn.execute("SELECT extract(second FROM now())::float8 AS s").fetchone()
        second = float(row["s"]) if row else 0.0
        if second > 60 - margin_s:
            time.sleep(60.5 - second)
        conn.execute("TRUNCATE fleet.job_attempts, fleet.job_runs")
        conn.execute("UPDATE fleet.schedules SET next_run_at = date_trunc('minute', now())")
        conn.execute("VACUUM ANALYZE fleet.schedules")
        conn.execute("VACUUM ANALYZE fleet.job_runs")
    created = 0
    with connect(url, "fleet-bench ticker", prepare=True) as conn:
        started = time.monotonic()
        for _ in range(100_000):
            r = run_once(conn, batch_size=DEFAULT_TICK_BATCH, catchup_limit=DEFAULT_CATCHUP_LIMIT)
            created += r.created
            if not r.schedules and not r.still_due:
                break
        return created, time.monotonic() - started


def run(bench: Bench, report: Report) -> None:
    n = bench.opts.schedules
    url = bench.server.database("ticker")
    text = "".join(
        f'[[schedule]]\nname = "minutely-{i:05d}"\nevery = "1m"\njob = "bench.noop"\n' for i in range(n)
    )
    with connect(url, "fleet-bench") as conn:
        t0 = time.monotonic()
        apply_specs(conn, load(text), prune=False)
        applied_s = time.monotonic() - t0
    report.add(
        "ticker.apply", f"apply {n:,} schedules (fleetctl apply's code, one transaction)", applied_s, "s"
    )

    rates = []
    for _ in range(bench.opts.repeat):
        created, seconds = materialise(url)
        if created != n:
            raise RuntimeError(f"the ticker created {created} slots for {n} due schedules")
        rates.append(created / seconds)
    report.add(
        "ticker.materialise",
        f"ticker materialisation, {n:,} due schedules (run_once in-process, batch {DEFAULT_TICK_BATCH})",
        median(rates),
        "slots/s",
        trials=rates,
    )

    # CPU: a real fleet-ticker, from the end of one minute's burst to the end of a later one.
    cycles = 1 if bench.opts.quick else 2
    with connect(url, "fleet-bench") as conn:
        conn.execute("TRUNCATE fleet.job_attempts, fleet.job_runs")
        conn.execute(
            "UPDATE fleet.schedules SET next_run_at = date_trunc('minute', now()) + interval '1 minute'"
        )
        conn.execute("VACUUM ANALYZE fleet.schedules")
        ticker = bench.procs.start(fleet_cmd("fleet-ticker"), env_for(url), bench.log("ticker-cpu"))
        try:
            wait_until(lambda: _runs(conn) >= n, 150, "the first minute's slots", 0.5, bench.procs, [ticker])
            cpu0, t0 = ticker.cpu_s(), time.monotonic()
            wait_until(
                lambda: _runs(conn) >= n * (1 + cycles), 60 * cycles + 90, "the next minutes' slots", 0.5,
                bench.procs, [ticker],
            )  # fmt: skip
            cpu1, t1 = ticker.cpu_s(), time.monotonic()
        finally:
            bench.procs.stop([ticker])
    share = (cpu1 - cpu0) / (t1 - t0) * 100
    report.add(
        "ticker.cpu",
        f"fleet-ticker CPU, {n:,} schedules due each minute ({cycles} minute{'s' if cycles > 1 else ''})",
        share,
        "% core",
        target="< 10",
        ok=lambda v: v < 10,
    )
    report.note(
        "ticker CPU: utime+stime of the fleet-ticker process from /proc/<pid>/stat, from the end of one "
        "minute's burst of slots to the end of a later one (whole minutes), divided by the wall time; no "
        "worker runs meanwhile. Materialisation: ticker.tick.run_once in-process with a prepared-statement "
        "connection, every schedule due once, until none is"
    )
    report.add(
        "ticker.cpu_per_slot",
        "fleet-ticker CPU per slot materialised",
        (cpu1 - cpu0) / (n * cycles) * 1e6,
        "us/slot",
    )
