"""Lag from a slot's time to its handler's start: one schedule every second (a fleet-ticker and one
fleet-worker), 1,000 schedules due in the same second (a ticker and 4 workers), and the peers'
every-second schedules."""

from __future__ import annotations

import time
from collections.abc import Sequence

from fleet.admin.apply import apply_specs
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench import stamps
from loadtest.bench.config import WORKER_FLAGS, Bench
from loadtest.bench.procs import env_for, fleet_cmd
from loadtest.bench.report import Report, add_lags, firing_interval, median, percentile
from loadtest.bench.server import wait_until

BURST = 1_000
BURST_EVERY_S = 10


def fleet_lag(
    bench: Bench, suffix: str, schedules: str, workers: int, seconds: float
) -> tuple[list[float], list[float], list[tuple[float, float]]]:
    """Run a ticker and `workers` workers on `schedules` (TOML) for `seconds`; returns the lags (s) to
    handler start and to the claim (job_runs.started_at), and the (slot, handler start) pairs, for
    slots after every process was ready."""
    url = bench.server.database(suffix)
    with connect(url, "fleet-bench") as conn:
        apply_specs(conn, load(schedules), prune=False)
    path = bench.log_dir / f"{suffix}.stamps"
    path.unlink(missing_ok=True)
    env = env_for(url, BENCH_STAMPS=str(path))
    procs = [bench.procs.start(fleet_cmd("fleet-ticker"), env, bench.log(f"{suffix}-ticker"))]
    procs += [
        bench.procs.start(
            fleet_cmd("fleet-worker", "--app", "loadtest.bench.jobs", "--id", f"bench-{i}", *WORKER_FLAGS),
            env,
            bench.log(f"{suffix}-worker-{i}"),
        )
        for i in range(workers)
    ]
    try:

        def ready_all() -> bool:
            # Every process registered itself, and every worker waits for wake-ups in LISTEN.
            with connect(url, "fleet-bench") as c:
                row = c.execute("SELECT count(*) AS n FROM fleet.processes").fetchone()
            return bool(row and row["n"] >= len(procs)) and bench.server.listeners(url) >= workers

        wait_until(ready_all, 60, "the ticker and workers to be ready", 0.2, bench.procs, procs)
        ready = time.time() + 1.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            bench.procs.check(procs)
            time.sleep(0.25)
        last = time.time() - 1.0  # slots this close to the end may not have run yet
    finally:
        bench.procs.stop(procs)
    kept = [(slot, start) for slot, start, _ in stamps.read(path) if ready <= slot <= last]
    to_start = [start - slot for slot, start in kept]
    with connect(url, "fleet-bench") as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM started_at - scheduled_for)::float8 AS lag FROM fleet.job_runs "
            "WHERE started_at IS NOT NULL AND scheduled_for BETWEEN to_timestamp(%s) AND to_timestamp(%s)",
            (ready, last),
        ).fetchall()
    return to_start, [r["lag"] for r in rows], kept


def last_starts(kept: Sequence[tuple[float, float]]) -> list[float]:
    """Per slot of `kept` (slot, handler start) pairs, seconds from the slot to its last start."""
    last: dict[float, float] = {}
    for slot, start in kept:
        last[slot] = max(start, last.get(slot, start))
    return [last[slot] - slot for slot in sorted(last)]


def run(bench: Bench, report: Report) -> None:
    o = bench.opts
    if bench.selected("lag"):
        one = '[[schedule]]\nname = "every-second"\nevery = "1s"\njob = "bench.stamp"\n'
        start, claim, kept = fleet_lag(bench, "lag", one, 1, o.lag_s)
        add_lags(report, "lag.fleet.every_second", "fleet, 1 schedule every second, slot to handler start",
                  start, p50="< 20", p99="< 50")  # fmt: skip
        report.add(
            "lag.fleet.every_second.claim_p50",
            f"fleet, 1 schedule every second, slot to claim (job_runs.started_at): p50 ({len(claim)} runs)",
            percentile([x * 1000 for x in claim], 50),
            "ms",
        )
        report.add("lag.fleet.every_second.interval", "fleet, every-second schedule: mean interval between "
                   "firings", firing_interval([start for _, start in kept]), "s")  # fmt: skip
        many = "".join(
            f'[[schedule]]\nname = "burst-{i:04d}"\nevery = "{BURST_EVERY_S}s"\njob = "bench.stamp"\n'
            for i in range(BURST)
        )
        start, _, kept = fleet_lag(bench, "burst", many, 4, o.burst_s)
        add_lags(report, "lag.fleet.burst", f"fleet, {BURST:,} schedules due in the same second, 4 workers",
                  start, p99="< 1000")  # fmt: skip
        lasts = last_starts(kept)
        report.add(
            "lag.fleet.burst.last_start",
            f"fleet, {BURST:,} schedules due in the same second, 4 workers: slot to the last start, "
            f"median of {len(lasts)} bursts",
            median(lasts) if lasts else None,
            "s",
            trials=lasts,
        )
    if bench.selected("peers"):
        from loadtest.bench import peers  # needs the peers' packages (the bench extra)

        peers.lag(bench, report)
    report.note(
        "lag: handler start (time.time() as the handler's first act, appended to a file) minus the slot's "
        "time; fleet: ctx.slot; procrastinate: the periodic task's timestamp; pgqueuer: the next_run handed "
        "to the previous firing (the schedule row is returned after it is advanced). Slots in the first "
        "second after the processes were ready, and in the last second, are left out"
    )
