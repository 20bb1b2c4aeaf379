"""A sustained load: 100,000 schedules every minute, their slots spread over the minute's seconds, for
10 whole minutes; the lag from slot to start, the slots missed, and the ticker's CPU."""

from __future__ import annotations

import datetime as dt
import time

from fleet.admin.apply import apply_specs
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench.config import Bench
from loadtest.bench.report import Report
from loadtest.bench.scheduled import (
    APPLY_PER_S,
    START_S,
    db_now,
    iso,
    start_fleet,
    starts,
    whole_minute_after,
)
from loadtest.bench.server import wait_until

# One worker drains about 10,000 no-op runs/s: two carry 100,000 a minute (1,700 runs/s) with room
# for the bursts of a shared machine.
WORKERS = 2
LAG_P99_MS = 2000.0
TICKER_CPU = 10.0  # % of a core
SETTLE_S = 60.0  # after the window, how long its last slots may take to start


def sustained_toml(n: int, first_minute: dt.datetime) -> str:
    """`n` schedules every minute, the i-th at second i % 60 of each minute from `first_minute` on."""
    return "".join(
        f'[[schedule]]\nname = "sustained-{i:06d}"\nevery = "1m"\n'
        f'start_at = "{iso(first_minute + dt.timedelta(seconds=i % 60))}"\njob = "bench.noop"\n'
        for i in range(n)
    )


def expected_slots(n: int, minutes: int) -> int:
    """Slots of `n` every-minute schedules in `minutes` whole minutes."""
    return n * minutes


def run(bench: Bench, report: Report) -> None:
    n, minutes = bench.opts.sustained, bench.opts.sustained_minutes
    url = bench.server.database("sustained")
    with connect(url, "fleet-bench") as conn:
        first = whole_minute_after(db_now(conn), n / APPLY_PER_S + START_S)
        apply_specs(conn, load(sustained_toml(n, first)), prune=False)
    end = first + dt.timedelta(minutes=minutes)
    fleet = start_fleet(bench, url, "sustained", WORKERS)
    try:
        with connect(url, "fleet-bench monitor") as conn:
            if db_now(conn) >= first:
                raise RuntimeError("sustained: the ticker and workers were ready only after the first slot")
            print(
                f"  sustained: {n:,} schedules every minute, measured {iso(first)} .. {iso(end)}", flush=True
            )

            def reached(t: dt.datetime) -> bool:
                return db_now(conn) >= t

            wait_until(lambda: reached(first), 120, "the first slot", 0.02, bench.procs, fleet.all)
            ticker0, workers0, t0 = (
                fleet.ticker.cpu_s(),
                sum(p.cpu_s() for p in fleet.workers),
                time.monotonic(),
            )
            wait_until(
                lambda: reached(end), minutes * 60 + 30, "the window's end", 0.05, bench.procs, fleet.all
            )
            ticker1, workers1, t1 = (
                fleet.ticker.cpu_s(),
                sum(p.cpu_s() for p in fleet.workers),
                time.monotonic(),
            )

            def settled() -> bool:
                row = conn.execute(
                    "SELECT NOT EXISTS (SELECT 1 FROM fleet.job_runs WHERE scheduled_for < %s "
                    "AND status IN ('pending', 'running')) AS ok",
                    (end,),
                ).fetchone()
                return bool(row and row["ok"])

            wait_until(settled, SETTLE_S, "the window's last runs", 0.2, bench.procs, fleet.all)
            got = starts(conn, first, end)
            row = conn.execute(
                "SELECT coalesce(sum(missed_slots), 0)::int AS n FROM fleet.schedules"
            ).fetchone()
            counted = int(row["n"]) if row else 0
    finally:
        bench.procs.stop(fleet.all)
    wall = t1 - t0
    expected = expected_slots(n, minutes)
    label = f"sustained: {n:,} schedules every minute, {minutes} min, {WORKERS} workers"
    report.add(
        "sustained.lag.p50", f"{label}: slot to start, p50 ({got.started:,} runs)", got.p50_s * 1000, "ms"
    )
    report.add(
        "sustained.lag.p99",
        f"{label}: slot to start, p99",
        got.p99_s * 1000,
        "ms",
        target=f"< {LAG_P99_MS:g}",
        ok=lambda v: v < LAG_P99_MS,
    )
    report.add("sustained.lag.max", f"{label}: slot to start, max", got.max_s * 1000, "ms")
    report.add(
        "sustained.missed",
        f"{label}: slots without a run, of {expected:,}",
        float(expected - got.runs),
        "slots",
        target="= 0",
        ok=lambda v: v == 0,
    )
    report.add(
        "sustained.missed_slots",
        f"{label}: slots the ticker counted missed (schedules.missed_slots, whole run)",
        float(counted),
        "slots",
        target="= 0",
        ok=lambda v: v == 0,
    )
    report.add(
        "sustained.not_started",
        f"{label}: runs not started within {SETTLE_S:g} s of the window's end",
        float(got.runs - got.started),
        "runs",
    )
    report.add(
        "sustained.ticker_cpu",
        f"{label}: fleet-ticker CPU",
        (ticker1 - ticker0) / wall * 100,
        "% core",
        target=f"< {TICKER_CPU:g}",
        ok=lambda v: v < TICKER_CPU,
    )
    report.add(
        "sustained.worker_cpu",
        f"{label}: workers' CPU, together",
        (workers1 - workers0) / wall * 100,
        "% core",
    )
    report.note(
        f"sustained: {n:,} schedules every 1m, the i-th starting at second i % 60 of the minute "
        f"({n / 60:,.0f} slots due each second), a fleet-ticker and {WORKERS} workers with the drain's "
        "flags; measured over whole minutes of the database's clock from the first slot: lag is the first "
        "attempt's started_at minus the slot, missed slots the window's expected slots less the runs "
        "created for it, and the sum of schedules.missed_slots (which counts the slots a late ticker's "
        "catch-up policy dropped); CPU is utime+stime from /proc/<pid>/stat over the "
        "window's wall time"
    )
