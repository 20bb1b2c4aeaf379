"""`fleetctl dashboard` at 10,000 schedules and 5 million runs: the time each page takes to serve
(over HTTP on loopback, from a `fleetctl dashboard` process), and the database CPU one live overview
adds (a page open in a browser asks for its live part every --refresh seconds)."""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from fleet.admin.apply import apply_specs
from fleet.health import rollup
from fleet.store import chores
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench.config import Bench
from loadtest.bench.procs import env_for, fleet_cmd
from loadtest.bench.report import Report, median, percentile
from loadtest.bench.server import checkpoint, serves_locally

SCHEDULES, QUICK_SCHEDULES = 10_000, 1_000
RUNS_PER_SCHEDULE, QUICK_RUNS = 500, 100  # 5,000,000 runs (quick: 100,000)
REQUESTS = 20  # per page
LIVE_S, QUICK_LIVE_S = 60.0, 15.0  # how long one live overview is watched
REFRESH_S = 3.0  # the dashboard's default --refresh
PAGE_TARGET_MS = 300.0
LOAD_TARGET_PCT = 1.0
_TICKS = os.sysconf("SC_CLK_TCK")


def fill(url: str, schedules: int, per: int) -> float:
    """Schedules (half every N s, half cron) with `per` finished runs each and an attempt per run;
    one run in a hundred of every tenth schedule dead; then the health roll-up's first pass, as a
    running ticker makes it. Returns the seconds the fill took."""
    t0 = time.monotonic()
    text = "".join(
        f'[[schedule]]\nname = "d{i:06d}"\n'
        + (f'every = "{60 + i % 3540}s"\n' if i % 2 else f'cron = "{i % 60} * * * *"\n')
        + 'job = "noop"\n'
        for i in range(schedules)
    )
    with connect(url, "fleet-bench dashboard") as conn:
        apply_specs(conn, load(text), prune=False)
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after, status, attempts,"
            " started_at, finished_at, last_outcome, last_error)"
            " SELECT s.name, t, 'noop', t,"
            "  (CASE WHEN g %% 100 = 7 AND right(s.name, 1) = '0' THEN 'dead' ELSE 'done' END)::fleet.run_status,"
            "  1, t, t + interval '20 ms',"
            "  CASE WHEN g %% 100 = 7 AND right(s.name, 1) = '0' THEN 'failed' ELSE 'done' END,"
            "  CASE WHEN g %% 100 = 7 AND right(s.name, 1) = '0' THEN 'ValueError: bad input' END"
            " FROM fleet.schedules s, generate_series(1, %s) g,"
            "  LATERAL (SELECT now() - make_interval(mins => g * 5)) AS x(t)",
            (per,),
        )
        conn.execute(
            "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, host, pid,"
            " started_at, finished_at, outcome, error)"
            " SELECT schedule_name, scheduled_for, 1, 'worker-' || (hashtext(schedule_name) & 3), 'bench', 1,"
            "  started_at, finished_at, last_outcome, last_error FROM fleet.job_runs"
        )
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        conn.execute("VACUUM ANALYZE fleet.job_attempts")
        # The tickers' health roll-up, as a running fleet has it: its first pass over the history
        # (until then every read probes each schedule's runs), and ticker_chores' period.
        chore = rollup.rollup_chore(2.0)
        chores.register(conn, [chore])
        while chores.run_due(conn, [chore]):
            pass
        conn.execute("ANALYZE fleet.schedules")
        conn.execute("ANALYZE fleet.schedule_stats")
        checkpoint(conn)
    return time.monotonic() - t0


def get(url: str) -> tuple[float, bytes]:
    """One GET; (milliseconds, body)."""
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as response:
        body: bytes = response.read()
    return (time.monotonic() - started) * 1000, body


def backend_cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def run(bench: Bench, report: Report) -> None:
    quick = bench.opts.quick
    n, per = (QUICK_SCHEDULES, QUICK_RUNS) if quick else (SCHEDULES, RUNS_PER_SCHEDULE)
    url = bench.server.database("dashboard")
    took = fill(url, n, per)
    print(f"  dashboard: {n:,} schedules, {n * per:,} runs filled in {took:.0f} s", flush=True)
    proc = bench.procs.start(
        fleet_cmd("fleetctl", "dashboard", "--listen", "127.0.0.1:0", "--refresh", f"{REFRESH_S:g}"),
        env_for(url),
        bench.log("dashboard"),
    )
    try:
        base = _address(proc.log)
        with connect(url, "fleet-bench dashboard") as conn:
            slot = conn.execute(
                "SELECT scheduled_for FROM fleet.job_runs WHERE schedule_name = 'd000010' AND status = 'dead'"
                " ORDER BY scheduled_for DESC LIMIT 1"
            ).fetchone()
        assert slot is not None
        slot_iso = slot["scheduled_for"].isoformat().replace("+00:00", "Z")
        pages = {
            "overview": ("", "the overview, first page"),
            "overview_live": ("?fragment=1", "the overview's live part (what an open page asks for)"),
            "overview_dead": ("?verdict=DEAD", "the overview filtered by verdict"),
            "overview_search": ("?name=d0042", "the overview filtered by name"),
            "schedule": ("schedules/d000010", "a schedule's page: timeline of 30 slots, dead runs"),
            "schedule_live": ("schedules/d000010?fragment=1", "a schedule page's live part"),
            "slot": (f"schedules/d000010/slots/{urllib.parse.quote(slot_iso)}", "a slot's attempts"),
            "workers": ("workers", "the workers page"),
        }
        label = f"dashboard, {n:,} schedules, {n * per:,} runs"
        for key, (path, what) in pages.items():
            times = []
            for i in range(REQUESTS):
                if key.startswith("overview") and i % 2 == 0:
                    time.sleep(REFRESH_S)  # every other request after the shared verdicts aged out
                ms, body = get(base + path)
                assert body, key
                times.append(ms)
            p95 = percentile(times, 95)
            print(f"  dashboard {key}: median {median(times):.0f} ms, p95 {p95:.0f} ms", flush=True)
            report.add(
                f"dashboard.{key}",
                f"{label}: {what}, p95 of {REQUESTS} requests",
                p95,
                "ms",
                trials=times,
                target=f"< {PAGE_TARGET_MS:g}",
                ok=lambda v: v < PAGE_TARGET_MS,
            )
        if serves_locally(url):
            _live_load(bench, report, url, base, label)
        else:
            report.note("dashboard: the server is not on this machine: its CPU time could not be read")
    finally:
        bench.procs.stop([proc])


def _live_load(bench: Bench, report: Report, url: str, base: str, label: str) -> None:
    """The database CPU time of the dashboard's sessions while one overview stays open."""
    watch_s = QUICK_LIVE_S if bench.opts.quick else LIVE_S
    get(base + "?fragment=1")  # the pool's sessions exist
    with connect(url, "fleet-bench dashboard") as conn:
        pids = [
            int(r["pid"])
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'fleetctl dashboard%%'"
            )
        ]
    stop = threading.Event()
    served: list[float] = []

    def browser() -> None:
        while not stop.wait(REFRESH_S):
            ms, _ = get(base + "?fragment=1")
            served.append(ms)

    before = backend_cpu_s(pids)
    started = time.monotonic()
    thread = threading.Thread(target=browser, daemon=True)
    thread.start()
    time.sleep(watch_s)
    stop.set()
    thread.join(30)
    wall = time.monotonic() - started
    used = backend_cpu_s(pids) - before
    pct = 100.0 * used / wall
    print(
        f"  dashboard live: {len(served)} updates in {wall:.0f} s, database CPU {used:.2f} s ({pct:.2f} % of a core)",
        flush=True,
    )
    report.add(
        "dashboard.live_db_load",
        f"{label}: database CPU of one overview left open (updates every {REFRESH_S:g} s), "
        f"% of one core over {wall:.0f} s",
        pct,
        "%",
        target=f"< {LOAD_TARGET_PCT:g}",
        ok=lambda v: v < LOAD_TARGET_PCT,
        note=f"{len(served)} updates, median {statistics.median(served) if served else 0:.0f} ms each",
    )


def _address(log: Path, timeout_s: float = 30.0) -> str:
    """The address `fleetctl dashboard` printed when it started serving."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        m = re.search(r"serving (http://\S+/)", log.read_text(errors="replace") if log.exists() else "")
        if m:
            return m.group(1)
        time.sleep(0.1)
    raise RuntimeError(f"fleetctl dashboard did not start: {log.read_text(errors='replace')[-2000:]}")
