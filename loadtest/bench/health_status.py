"""Health at 100,000 schedules (half interval, half cron) over 20 million finished runs: `fleetctl
status --json` read and rendered in-process, the whole command's wall time, and `fleetctl metrics`'
computation and one scrape, once the tickers' roll-up has passed over the history (its first pass
is timed too)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

import fleet
from fleet.admin.apply import apply_specs
from fleet.health import rollup
from fleet.health.reading import health_chunks
from fleet.ops.httpd import Credentials
from fleet.ops.metrics import FleetCollector
from fleet.ops.metrics_server import Exposition, MetricsServer
from fleet.ops.status import schedule_health, write_json_chunks
from fleet.store import chores
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench.config import Bench
from loadtest.bench.procs import BIN
from loadtest.bench.report import Report, median

SCHEDULES, QUICK_SCHEDULES = 100_000, 5_000
RUNS, QUICK_RUNS = 20_000_000, 200_000
FILL_BATCH = 2_000_000  # finished rows per INSERT
TARGET_MS = 500.0


def schedules_text(n: int) -> str:
    """`n` schedules: even ones every 1 to 59 minutes, odd ones on 60 different cron lines."""
    out = []
    for i in range(n):
        timing = f'every = "{60 + i % 3540}s"' if i % 2 == 0 else f'cron = "{i % 60} */{1 + i % 6} * * *"'
        out.append(f'[[schedule]]\nname = "h{i:06d}"\n{timing}\njob = "noop"\n')
    return "".join(out)


FILL = (
    "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after, status, attempts, started_at,"
    " finished_at, last_outcome, last_error)"
    " SELECT s.name, t, 'noop', t, x.status::fleet.run_status, 1, t, t + interval '1 second', x.status,"
    " CASE WHEN x.status = 'dead' THEN 'boom' END"
    " FROM (SELECT name, row_number() OVER (ORDER BY name) AS k FROM fleet.schedules) s"
    " CROSS JOIN generate_series(%(first)s::int, %(last)s::int) g"
    " CROSS JOIN LATERAL (SELECT now() - make_interval(mins => g * 7 + (s.k %% 7)::int) AS t) tt"
    " CROSS JOIN LATERAL (SELECT CASE WHEN (g + s.k) %% 997 = 0 THEN 'dead'"
    " WHEN (g + s.k) %% 13 = 0 THEN 'skipped' ELSE 'done' END AS status) x"
)


def status_json(conn: psycopg.Connection[Any]) -> None:
    """What `fleetctl status --json` does once connected, written to /dev/null."""
    real = sys.stdout
    with open(os.devnull, "w") as devnull:
        sys.stdout = devnull
        try:
            write_json_chunks(health_chunks(conn))
        finally:
            sys.stdout = real


def run(bench: Bench, report: Report) -> None:
    quick = bench.opts.quick
    n, runs = (QUICK_SCHEDULES, QUICK_RUNS) if quick else (SCHEDULES, RUNS)
    per = runs // n
    url = bench.server.database("health")
    started = time.monotonic()
    with connect(url, "fleet-bench health") as conn:
        apply_specs(conn, load(schedules_text(n)), prune=False)
        for first in range(1, per + 1, max(1, FILL_BATCH // n)):
            last = min(per, first + max(1, FILL_BATCH // n) - 1)
            with conn.transaction():
                if conn.execute("SELECT current_setting('is_superuser') AS su").fetchone() == {"su": "on"}:
                    # the rows are consistent by construction: skip the per-row foreign-key checks
                    conn.execute("SET LOCAL session_replication_role = replica")
                conn.execute(FILL, {"first": first, "last": last})
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        conn.execute("ANALYZE fleet.schedules")
        filled_s = time.monotonic() - started
        print(f"  health: {n:,} schedules, {n * per:,} finished runs in {filled_s:.0f} s", flush=True)
        chore = rollup.rollup_chore(2.0)
        chores.register(conn, [chore])
        started = time.monotonic()
        steps = 0
        while chores.run_due(conn, [chore]):
            steps += 1
        first_pass_s = time.monotonic() - started
        conn.execute("ANALYZE fleet.schedule_stats")
        reads, renders = [], []
        for _ in range(1 if quick else 3):
            t0 = time.monotonic()
            found = schedule_health(conn)
            reads.append((time.monotonic() - t0) * 1000)
            t0 = time.monotonic()
            status_json(conn)
            renders.append((time.monotonic() - t0) * 1000)
        assert len(found) == n
    commands = []
    env = {**os.environ, "FLEET_DATABASE_URL": url}
    # fleet's modules compiled to bytecode first, as pip does when it installs fleet: an editable
    # checkout run with PYTHONDONTWRITEBYTECODE would otherwise compile them at every start.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(fleet.__file__).parent)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for _ in range(1 if quick else 3):
        t0 = time.monotonic()
        done = subprocess.run(
            [str(BIN / "fleetctl"), "status", "--json"], env=env, stdout=subprocess.DEVNULL, check=False
        )
        commands.append((time.monotonic() - t0) * 1000)
        assert done.returncode in (0, 1), done.returncode
    collector = FleetCollector(url, settle_s=0)
    exposition = Exposition(collector.parts, interval_s=3600)
    # the first computation writes every family; the next ones rewrite only the families whose
    # values changed (here the durations since the last success), as between two scrapes
    t0 = time.monotonic()
    exposition.refresh()
    first_compute = (time.monotonic() - t0) * 1000
    size_mb = sum(map(len, exposition.latest(1.0) or ())) / 1e6
    computes = []
    for _ in range(1 if quick else 3):
        t0 = time.monotonic()
        exposition.refresh()
        computes.append((time.monotonic() - t0) * 1000)
    server = MetricsServer(("127.0.0.1", 0), exposition, Credentials())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scrapes = []
    try:
        address = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        for _ in range(5):
            t0 = time.monotonic()
            with urllib.request.urlopen(address, timeout=60) as response:
                response.read()
            scrapes.append((time.monotonic() - t0) * 1000)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    label = f"{n:,} schedules, {n * per:,} finished runs"
    print(
        f"  health: read {median(reads):.0f} ms, status --json {median(renders):.0f} ms in-process,"
        f" {median(commands):.0f} ms as a command; metrics compute {first_compute:.0f} ms first,"
        f" {median(computes):.0f} ms again ({size_mb:.0f} MB),"
        f" scrape {statistics.median(scrapes):.1f} ms; first roll-up pass {first_pass_s:.1f} s ({steps} steps)",
        flush=True,
    )
    target, ok = f"< {TARGET_MS:g}", lambda v: v < TARGET_MS
    report.add(
        "health.read",
        f"{label}: Client.status / schedule_health, read into ScheduleHealth objects",
        median(reads),
        "ms",
        trials=reads,
    )
    report.add(
        "health.status_json",
        f"{label}: status --json in-process (read and written out)",
        median(renders),
        "ms",
        trials=renders,
        target=target,
        ok=ok,
    )
    report.add(
        "health.status_command",
        f"{label}: the whole `fleetctl status --json` command (start-up included)",
        median(commands),
        "ms",
        trials=commands,
        target=target,
        ok=ok,
    )
    report.add(
        "health.metrics_first_compute",
        f"{label}: computing the metrics exposition the first time ({size_mb:.0f} MB of text)",
        first_compute,
        "ms",
    )
    report.add(
        "health.metrics_compute",
        f"{label}: computing the metrics exposition again (each interval)",
        median(computes),
        "ms",
        trials=computes,
        target=target,
        ok=ok,
    )
    report.add(
        "health.metrics_scrape",
        f"{label}: one scrape served (median of 5)",
        statistics.median(scrapes),
        "ms",
        trials=scrapes,
        target=target,
        ok=ok,
    )
    report.add("health.first_pass", f"{label}: the roll-up's first pass over the history", first_pass_s, "s")
    report.note(
        "health: a read costs O(schedules): per-schedule stats kept by the tickers' roll-up, the runs "
        "finished since its mark, and the open and dead runs through their partial indexes; the whole "
        "command is timed with fleet's modules compiled to bytecode, as an installed fleet has them"
    )
