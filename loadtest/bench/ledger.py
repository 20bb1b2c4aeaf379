"""The slot ledger over a year of a one-minute schedule (525,601 slots, a run each): `fleet.Client.verify`
in-process, the whole `fleetctl verify` command, and the same year of a `* * * * *` cron, whose slots
come a day at a time (the plain walk of the expression is timed on its own too, for comparison)."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg

from fleet.admin.apply import apply_specs
from fleet.client import Client
from fleet.store.db import connect
from fleet.timing.schedfile import load
from fleet.timing.schedule import Timing, slots_between
from loadtest.bench.config import Bench
from loadtest.bench.procs import BIN
from loadtest.bench.report import Report, median

DAYS, QUICK_DAYS = 365, 30
TARGET_MS = 2000.0
SCHEDULES = """
[[schedule]]
name = "every-minute"
every = "1m"
job = "noop"

[[schedule]]
name = "cron-minute"
cron = "* * * * *"
job = "noop"
"""
FILL = (
    "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, started_at,"
    " finished_at, last_outcome)"
    " SELECT %(name)s, t, 'noop', 'done', 1, t, t, t + interval '1 second', 'done'"
    " FROM generate_series(%(since)s::timestamptz, %(until)s, interval '1 minute') t"
)


def fill(conn: psycopg.Connection[Any], days: int) -> tuple[datetime, datetime]:
    """Both schedules with a done run at every minute of the last `days` days, created before them."""
    apply_specs(conn, load(SCHEDULES), prune=False)
    row = conn.execute("SELECT date_trunc('minute', now()) AS until").fetchone()
    assert row is not None
    until: datetime = row["until"]
    since = until - timedelta(days=days)
    for name in ("every-minute", "cron-minute"):
        with conn.transaction():
            conn.execute(FILL, {"name": name, "since": since, "until": until})
    conn.execute(
        "UPDATE fleet.schedules SET created_at = %s, next_run_at = %s",
        (since - timedelta(days=1), until + timedelta(minutes=1)),
    )
    conn.execute("VACUUM ANALYZE fleet.job_runs")
    return since, until


def timed(url: str, name: str, since: datetime, until: datetime, trials: int) -> tuple[list[float], int]:
    """Milliseconds per Client.verify of one schedule over the window, and the slots it proved."""
    took, slots = [], 0
    with Client(url) as client:
        for _ in range(trials):
            t0 = time.monotonic()
            result = client.verify([name], since, until, max_window=until - since + timedelta(days=1))
            took.append((time.monotonic() - t0) * 1000)
            (ledger,) = result.schedules
            assert ledger.ok and ledger.counts["once"] == ledger.slots, ledger.counts
            slots = ledger.slots
    return took, slots


def run(bench: Bench, report: Report) -> None:
    quick = bench.opts.quick
    days = QUICK_DAYS if quick else DAYS
    trials = 1 if quick else 3
    url = bench.server.database("verify")
    with connect(url, "fleet-bench verify") as conn:
        since, until = fill(conn, days)
    label = f"{days} days of a one-minute schedule"

    interval_ms, slots = timed(url, "every-minute", since, until, trials)
    window = ["--since", since.isoformat(), "--until", until.isoformat(), "--max-window", f"{days + 1}d"]
    commands = []
    for _ in range(trials):
        t0 = time.monotonic()
        done = subprocess.run(
            [str(BIN / "fleetctl"), "verify", "--schedule", "every-minute", *window],
            env={**os.environ, "FLEET_DATABASE_URL": url},
            stdout=subprocess.DEVNULL,
            check=False,
        )
        commands.append((time.monotonic() - t0) * 1000)
        assert done.returncode == 0, done.returncode
    cron_ms, cron_slots = timed(url, "cron-minute", since, until, trials)
    t0 = time.monotonic()
    walked = len(slots_between(Timing(cron="* * * * *"), since, until, 10**7))
    walk_ms = (time.monotonic() - t0) * 1000
    assert walked == cron_slots == slots
    print(
        f"  verify: {slots:,} slots; interval {median(interval_ms):.0f} ms in-process,"
        f" {median(commands):.0f} ms as a command; cron {median(cron_ms):.0f} ms"
        f" (the plain walk alone {walk_ms:.0f} ms)",
        flush=True,
    )
    target, ok = f"< {TARGET_MS:g}", lambda v: v < TARGET_MS
    report.add(
        "verify.interval",
        f"{label} ({slots:,} slots, a run each): Client.verify, slots by arithmetic",
        median(interval_ms),
        "ms",
        trials=interval_ms,
        target=target,
        ok=ok,
    )
    report.add(
        "verify.interval_command",
        f"{label}: the whole `fleetctl verify` command (start-up included)",
        median(commands),
        "ms",
        trials=commands,
        target=target,
        ok=ok,
    )
    report.add(
        "verify.cron",
        f"{label} as cron `* * * * *`: Client.verify, slots a day at a time",
        median(cron_ms),
        "ms",
        trials=cron_ms,
        target=target,
        ok=ok,
    )
    report.add(
        "verify.cron_walk",
        f"{label} as cron `* * * * *`: its slots by the plain walk alone (fleet.timing.schedule.slots_between)",
        walk_ms,
        "ms",
    )
