"""Recovery after SIGKILL: two workers with a short lease and a long poll; the one holding a run is
killed, and the time from the kill to the next attempt's start (job_runs.started_at) is measured."""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Callable
from typing import Any

import orjson
import psycopg

from fleet.store.db import connect
from loadtest.bench.backlog import SLOT_BASE, add_schedule
from loadtest.bench.config import Bench
from loadtest.bench.procs import Proc, env_for, fleet_cmd
from loadtest.bench.report import Report, percentile
from loadtest.bench.server import wait_until

POLL_S = 30.0  # far longer than the lease: a retake must not wait for a poll
JOB_S = 1.0  # the job's sleep: the kill lands while it runs


class Slot:
    """The k-th run of the reclaim schedule."""

    def __init__(self, conn: psycopg.Connection[dict[str, Any]], k: int) -> None:
        self.conn = conn
        self.k = k

    def insert(self) -> None:
        with self.conn.transaction():
            self.conn.execute(
                "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
                "VALUES ('reclaim', %s::timestamptz + make_interval(secs => %s), 'bench.sleep', %s::jsonb, "
                "        'allow', now())",
                (SLOT_BASE, self.k, orjson.dumps({"seconds": JOB_S}).decode()),
            )
            self.conn.execute("SELECT pg_notify('fleet_runs', '')")

    def row(self) -> dict[str, Any]:
        r = self.conn.execute(
            "SELECT status::text AS status, attempts, locked_by, started_at FROM fleet.job_runs "
            "WHERE schedule_name = 'reclaim' AND scheduled_for = %s::timestamptz + make_interval(secs => %s)",
            (SLOT_BASE, self.k),
        ).fetchone()
        assert r is not None
        return r

    def wait(self, cond: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            r = self.row()
            return r if cond(r) else None

        return wait_until(check, timeout, what, 0.005)


def run(bench: Bench, report: Report) -> None:
    lease = bench.opts.lease_s
    url = bench.server.database("reclaim")
    env = env_for(url)
    with connect(url, "fleet-bench") as conn:
        add_schedule(conn, "reclaim", job="bench.sleep", max_attempts=1_000_000)
    ids = itertools.count()
    flags = ("--lease", str(lease), "--poll", str(POLL_S), "--concurrency", "1")

    def start_worker() -> tuple[str, Proc]:
        wid = f"reclaim-{next(ids)}"
        cmd = fleet_cmd("fleet-worker", "--app", "loadtest.bench.jobs", "--id", wid, *flags)
        return wid, bench.procs.start(cmd, env, bench.log(wid))

    workers = dict(start_worker() for _ in range(2))
    lags: list[float] = []
    try:
        with connect(url, "fleet-bench") as conn:
            for k in range(bench.opts.kills):
                live = list(workers.values())
                wait_until(
                    lambda: bench.server.listeners(url) >= 2, 60, "two workers", 0.05, bench.procs, live
                )
                slot = Slot(conn, k)
                slot.insert()
                first = slot.wait(lambda r: r["attempts"] == 1 and r["locked_by"] is not None, 30, "a claim")
                holder = str(first["locked_by"])
                workers[holder].signal(signal.SIGKILL)
                killed = time.time()
                workers.pop(holder).popen.wait(10)
                wid, proc = start_worker()
                workers[wid] = proc
                second = slot.wait(lambda r: r["attempts"] >= 2, lease + 30, "the retake")
                lags.append(second["started_at"].timestamp() - killed)
                slot.wait(lambda r: r["status"] == "done", 30, "the retaken run to finish")
    finally:
        bench.procs.stop(list(workers.values()))
    report.note(
        f"reclaim: two workers (--lease {lease:g} --poll {POLL_S:g} --concurrency 1) and one {JOB_S:g} s "
        "job at a time; the worker holding it is SIGKILLed right after its claim is seen, a replacement is "
        "started, and the time from the kill (wall clock) to the next attempt's job_runs.started_at is "
        "measured"
    )
    label = f"reclaim after SIGKILL (--lease {lease:g} --poll {POLL_S:g}), kill to next attempt start"
    target = lease + 0.5
    report.add("reclaim.p50", f"{label}: p50 ({len(lags)} kills)", percentile(lags, 50), "s")
    report.add(
        "reclaim.p99",
        f"{label}: p99",
        percentile(lags, 99),
        "s",
        target=f"<= {target:g}",
        ok=lambda v: v <= target,
    )
    report.add("reclaim.max", f"{label}: max", max(lags), "s", trials=lags)
