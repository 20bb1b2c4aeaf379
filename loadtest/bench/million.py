"""A million hourly schedules: `fleetctl apply` of their file (wall time and peak RSS, creating them,
then again unchanged), and one fleet-ticker over them (RSS, CPU per slot, lateness of the slots)."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path

from fleet.store.db import connect
from loadtest.bench.config import Bench
from loadtest.bench.procs import Proc, env_for, fleet_cmd
from loadtest.bench.report import Report
from loadtest.bench.server import wait_until

# The ticker runs for bench.opts.million_s (600 s by default) after its first slot: a sixth of the
# hour, so a sixth of the slots.
APPLY_TARGET_S = 120.0
APPLY_TARGET_MIB = 2048.0
TICKER_TARGET_MIB = 100.0
TICKER_TARGET_CORE = 10.0  # % of one core, as for 10,000 schedules a minute


def schedule_lines(n: int) -> Iterator[str]:
    """The schedules file, a table at a time: `n` hourly schedules spread evenly over the hour, the
    i-th at second i mod 3600 of it (cron with seconds, "S M * * * *")."""
    for i in range(n):
        second = i % 3600
        yield (
            f'[[schedule]]\nname = "hourly-{i:07d}"\ncron = "{second % 60} {second // 60} * * * *"\n'
            'job = "bench.noop"\n'
        )


def write_file(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(schedule_lines(n))


def timed_apply(bench: Bench, url: str, path: Path, name: str) -> tuple[float, float, float]:
    """Run `fleetctl apply FILE` to its end: (wall seconds, peak RSS in MiB, CPU seconds)."""
    started = time.monotonic()
    proc = bench.procs.start(fleet_cmd("fleetctl", "apply", str(path)), env_for(url), bench.log(name))
    # wait4 gives the child's own peak RSS (ru_maxrss, KiB), which /proc no longer has once it exits.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.popen.returncode = os.waitstatus_to_exitcode(status)
    bench.procs.started.remove(proc)
    if proc.popen.returncode != 0:
        raise RuntimeError(
            f"fleetctl apply exited with {proc.popen.returncode}; log {proc.log}:\n{proc.tail()}"
        )
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _runs(url: str) -> tuple[int, dt.datetime]:
    """The runs in job_runs, and the database's now()."""
    with connect(url, "fleet-bench") as conn:
        row = conn.execute("SELECT count(*) AS n, now() AS now FROM fleet.job_runs").fetchone()
        assert row is not None
        return int(row["n"]), row["now"]


def _caught_up(url: str) -> bool:
    """No schedule's next slot is more than a second past (read through the due-schedule index)."""
    with connect(url, "fleet-bench") as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM fleet.schedules"
            " WHERE enabled AND paused_at IS NULL AND next_run_at < now() - interval '1 second'"
        ).fetchone()
        return row is not None and row["n"] == 0


def rss_mib(proc: Proc, field: str) -> float:
    """A process's VmRSS or VmHWM (peak) from /proc, in MiB."""
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {proc.pid}")


def run(bench: Bench, report: Report) -> None:
    n = bench.opts.million
    window_s = float(bench.opts.million_s)
    url = bench.server.database("million")
    path = bench.log_dir / "million.toml"
    write_file(path, n)
    try:
        created = timed_apply(bench, url, path, "million-apply")
        print(f"  million: apply {n:,} new in {created[0]:.0f}s, peak RSS {created[1]:,.0f} MiB", flush=True)
        again = timed_apply(bench, url, path, "million-apply-again")
        print(
            f"  million: apply {n:,} unchanged in {again[0]:.0f}s, peak RSS {again[1]:,.0f} MiB", flush=True
        )
    finally:
        path.unlink(missing_ok=True)
    what = f"fleetctl apply, a file of {n:,} hourly schedules"
    for key, how, (wall, rss, cpu) in (
        ("apply", "creating them", created),
        ("apply_again", "again unchanged", again),
    ):
        report.add(
            f"million.{key}",
            f"{what}, {how}: wall time",
            wall,
            "s",
            target=f"< {APPLY_TARGET_S:g}",
            ok=lambda v: v < APPLY_TARGET_S,
        )
        report.add(
            f"million.{key}_rss",
            f"{what}, {how}: peak RSS of fleetctl",
            rss,
            "MiB",
            target=f"< {APPLY_TARGET_MIB:g}",
            ok=lambda v: v < APPLY_TARGET_MIB,
        )
        if key == "apply":
            report.add("million.apply_cpu", f"{what}, {how}: CPU of fleetctl", cpu, "s")

    ticker = bench.procs.start(fleet_cmd("fleet-ticker"), env_for(url), bench.log("million-ticker"))
    try:
        # Its first ticks make the slots that came due since the apply, late: the window starts after.
        wait_until(lambda: _caught_up(url), 300, "the ticker to catch up", 0.5, bench.procs, [ticker])
        cpu0, (runs0, since), t0 = ticker.cpu_s(), _runs(url), time.monotonic()
        while time.monotonic() - t0 < window_s:
            time.sleep(1.0)
            bench.procs.check([ticker])
        cpu1, (runs1, _), t1 = ticker.cpu_s(), _runs(url), time.monotonic()
        rss, peak = rss_mib(ticker, "VmRSS"), rss_mib(ticker, "VmHWM")
    finally:
        bench.procs.stop([ticker])
    with connect(url, "fleet-bench") as conn:
        row = conn.execute(
            "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness) AS p99, max(lateness) AS worst "
            "FROM (SELECT extract(epoch FROM created_at - scheduled_for)::float8 * 1000 AS lateness "
            "      FROM fleet.job_runs WHERE scheduled_for > %s) r",
            (since,),
        ).fetchone()
    slots = runs1 - runs0
    print(
        f"  million: ticker made {slots:,} slots in {t1 - t0:.0f}s ({n * (t1 - t0) / 3600:,.0f} came due), "
        f"CPU {cpu1 - cpu0:.1f}s, RSS {rss:.0f} MiB (peak {peak:.0f})",
        flush=True,
    )
    label = f"fleet-ticker over {n:,} hourly schedules, {(t1 - t0) / 60:.0f} min ({slots:,} slots)"
    report.add(
        "million.ticker_rss",
        f"{label}: peak RSS",
        peak,
        "MiB",
        target=f"< {TICKER_TARGET_MIB:g}",
        ok=lambda v: v < TICKER_TARGET_MIB,
    )
    report.add(
        "million.ticker_cpu_per_slot",
        f"{label}: CPU per slot",
        (cpu1 - cpu0) / max(slots, 1) * 1e6,
        "us/slot",
    )
    report.add(
        "million.ticker_cpu",
        f"{label}: CPU",
        (cpu1 - cpu0) / (t1 - t0) * 100,
        "% core",
        target=f"< {TICKER_TARGET_CORE:g}",
        ok=lambda v: v < TICKER_TARGET_CORE,
    )
    if row and row["p99"] is not None:
        lateness = f"{label}: slot created after its time"
        report.add("million.slot_lateness_p99", f"{lateness}, p99", row["p99"], "ms")
        report.add("million.slot_lateness_max", f"{lateness}, max", row["worst"], "ms")
    report.note(
        f'million: {n:,} schedules, each hourly at its own second of the hour (cron "S M * * * *", '
        f"about {n / 3600:,.0f} slots a second), written to a TOML file and applied by a `fleetctl apply` "
        "process (wall time from start to exit, peak RSS and CPU from its rusage), then applied again "
        "unchanged; then one fleet-ticker runs over them with no worker and, once it has made the slots "
        f"that came due during the applies, is measured for {window_s / 60:g} min: its CPU from "
        "/proc/<pid>/stat, its peak RSS (VmHWM, the catching up included), the slots "
        "it created (rows of job_runs) and how long after its time each slot of the window was created "
        "(created_at - scheduled_for)"
    )
