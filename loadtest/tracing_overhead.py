"""What tracing costs a worker: no-op throughput with tracing off, on with an unreachable collector,
and on with a live OTLP/HTTP receiver. Prints runs/s per mode (median of --repeat trials).

    .venv/bin/python -m loadtest.tracing_overhead [--runs 20000] [--repeat 3]

Each trial inserts --runs due no-op runs into a scratch database and lets one real `fleet-worker
--until-idle` process run them. Throughput is taken from the attempt history (first start to last
finish), so process start-up is not counted. Modes are interleaved so drift on a noisy machine
hits them alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import fleet
from fleet import JobContext

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
JOB = "tracing-overhead.noop"
MODES = ("off", "unreachable", "receiver")


@fleet.job(JOB)
def noop(ctx: JobContext) -> None:
    """Does nothing: the run's cost is fleet's own."""


class _Sink(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP exports and counts them, as a collector would (without decoding)."""

    requests = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
        pass


@contextmanager
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nobody listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def scratch_database() -> Iterator[str]:
    from psycopg.conninfo import make_conninfo

    from fleet.store.db import connect
    from fleet.store.embedded import embedded_url
    from fleet.store.migrate import migrate

    server = os.environ.get("FLEET_DATABASE_URL") or embedded_url(ROOT)
    name = f"fleet_tracing_bench_{os.getpid()}"
    with connect(server, "fleet-bench admin") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(server, dbname=name)
    try:
        with connect(url, "fleet-bench") as conn:
            migrate(conn)
            conn.execute(
                "INSERT INTO fleet.schedules (name, every, job, overlap, next_run_at, timing_hash) "
                "VALUES ('bench', interval '1 day', %s, 'allow', '2099-01-01', '')",
                (JOB,),
            )
        yield url
    finally:
        with connect(server, "fleet-bench admin") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class Trial:
    runs_per_s: float  # first start to last finish, from the attempt history
    cpu_us_per_run: float  # the worker process's CPU time (all its threads, start-up included) per run


def trial(url: str, mode: str, runs: int, worker_args: list[str], endpoint: str) -> Trial:
    """Run `runs` no-op runs through one worker process."""
    from fleet.store.db import connect

    with connect(url, "fleet-bench") as conn:
        conn.execute("TRUNCATE fleet.job_attempts, fleet.job_runs")
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
            "SELECT 'bench', '2026-01-01'::timestamptz + make_interval(secs => g), %s, 'allow', now() "
            "FROM generate_series(1, %s) g",
            (JOB, runs),
        )
        conn.execute("VACUUM ANALYZE fleet.job_runs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    env.update(FLEET_DATABASE_URL=url, PYTHONPATH=str(ROOT), OTEL_BSP_SCHEDULE_DELAY="200")
    if mode == "off":
        env["OTEL_TRACES_EXPORTER"] = "none"
    else:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    argv = [
        str(BIN / "fleet-worker"),
        "--app",
        "loadtest.tracing_overhead",
        "--until-idle",
        "--id",
        f"bench-{mode}",
        *worker_args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"fleet-worker failed ({mode}):\n{done.stderr.decode(errors='replace')}")
    with connect(url, "fleet-bench") as conn:
        row = conn.execute(
            "SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at))::float8 AS s "
            "FROM fleet.job_attempts WHERE outcome = 'done'"
        ).fetchone()
    assert row is not None
    if row["n"] != runs:
        raise SystemExit(f"{mode}: {row['n']} of {runs} runs done")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Trial(runs / row["s"], cpu / runs * 1e6)


def measure(runs: int, repeat: int, modes: tuple[str, ...], worker_args: list[str]) -> dict[str, list[Trial]]:
    """Trials per mode, interleaved."""
    results: dict[str, list[Trial]] = {m: [] for m in modes}
    unreachable = f"http://127.0.0.1:{closed_port()}"
    with scratch_database() as url, receiver() as live:
        endpoints = {"off": "", "unreachable": unreachable, "receiver": live}
        for _ in range(repeat):
            for mode in modes:
                results[mode].append(trial(url, mode, runs, worker_args, endpoints[mode]))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20000, help="no-op runs per trial (20000)")
    p.add_argument("--repeat", type=int, default=3, help="trials per mode; the median is reported (3)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {', '.join(MODES)}")
    p.add_argument("--concurrency", type=int, default=32, help="worker --concurrency (32)")
    p.add_argument("--claim-batch", type=int, default=100, help="worker --claim-batch (100)")
    a = p.parse_args(argv)
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    if unknown := set(modes) - set(MODES):
        p.error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    worker_args = ["--concurrency", str(a.concurrency), "--claim-batch", str(a.claim_batch)]
    started = time.monotonic()
    results = measure(a.runs, a.repeat, modes, worker_args)
    base = statistics.median(t.runs_per_s for t in results["off"]) if "off" in results else None
    print(
        f"no-op runs through one fleet-worker ({' '.join(worker_args)}), {a.runs} runs per trial, "
        f"median of {a.repeat}:"
    )
    for mode in modes:
        med = statistics.median(t.runs_per_s for t in results[mode])
        cpu = statistics.median(t.cpu_us_per_run for t in results[mode])
        rel = f" {(med / base - 1) * 100:+6.1f}% vs off" if base and mode != "off" else " " * 16
        trials = ", ".join(f"{t.runs_per_s:,.0f}" for t in results[mode])
        print(f"  tracing {mode:<12} {med:>9,.0f} runs/s{rel}  {cpu:6.0f} us CPU/run   trials: {trials}")
    print(f"({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
