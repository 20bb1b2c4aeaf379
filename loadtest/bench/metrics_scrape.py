"""`fleetctl metrics` at 20,000 schedules: the time one computation of the exposition takes (the
health query and the counters, once per --interval), and the time a scrape takes, served from it
over HTTP on loopback."""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request

from fleet.admin.apply import apply_specs
from fleet.ops.httpd import Credentials
from fleet.ops.metrics import FleetCollector
from fleet.ops.metrics_server import Exposition, MetricsServer
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench.config import Bench
from loadtest.bench.report import Report, median

SCHEDULES, QUICK_SCHEDULES = 20_000, 2_000
RUNS_PER_SCHEDULE = 5  # finished history behind each schedule's health
SCRAPES = 20
TARGET_MS = 500.0


def run(bench: Bench, report: Report) -> None:
    n = QUICK_SCHEDULES if bench.opts.quick else SCHEDULES
    url = bench.server.database("metrics")
    text = "".join(
        f'[[schedule]]\nname = "m{i:06d}"\nevery = "{60 + i % 3540}s"\njob = "noop"\n' for i in range(n)
    )
    with connect(url, "fleet-bench metrics") as conn:
        apply_specs(conn, load(text), prune=False)
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after, status, attempts,"
            " started_at, finished_at, last_outcome)"
            " SELECT s.name, now() - make_interval(mins => g), 'noop', now() - make_interval(mins => g),"
            " 'done', 1, now() - make_interval(mins => g), now() - make_interval(mins => g), 'done'"
            " FROM fleet.schedules s, generate_series(1, %s) g",
            (RUNS_PER_SCHEDULE,),
        )
        conn.execute("ANALYZE fleet.schedules")
        conn.execute("ANALYZE fleet.job_runs")
    collector = FleetCollector(url, settle_s=0)
    exposition = Exposition(collector.parts, interval_s=3600)
    computes = []
    for _ in range(1 if bench.opts.quick else 3):
        started = time.monotonic()
        exposition.refresh()
        computes.append(time.monotonic() - started)
    size = sum(map(len, exposition.latest(0) or ()))
    server = MetricsServer(("127.0.0.1", 0), exposition, Credentials())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scrapes = []
    try:
        address = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        for _ in range(SCRAPES):
            started = time.monotonic()
            with urllib.request.urlopen(address, timeout=30) as response:
                response.read()
            scrapes.append((time.monotonic() - started) * 1000)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    label = f"fleetctl metrics, {n:,} schedules ({n * RUNS_PER_SCHEDULE:,} finished runs)"
    print(
        f"  metrics: compute {median(computes):.2f} s, scrape median {statistics.median(scrapes):.1f} ms",
        flush=True,
    )
    report.add(
        "metrics.scrape",
        f"{label}: one scrape, served from the shared exposition (median of {SCRAPES})",
        statistics.median(scrapes),
        "ms",
        trials=scrapes,
        target=f"< {TARGET_MS:g}",
        ok=lambda v: v < TARGET_MS,
    )
    report.add("metrics.scrape_max", f"{label}: slowest of the {SCRAPES} scrapes", max(scrapes), "ms")
    report.add(
        "metrics.compute",
        f"{label}: computing the exposition from the database, once per --interval (15 s)",
        median(computes),
        "s",
        trials=computes,
    )
    report.add("metrics.size", f"{label}: exposition size", size / 2**20, "MiB")
    report.note(
        "metrics: the exposition is computed by one thread once per --interval and every scrape in "
        "between is served from it; the computation's cost grows with the schedules and their history"
    )
