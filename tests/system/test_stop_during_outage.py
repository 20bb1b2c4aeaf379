"""Stopping while the database is out of reach: a ticker or worker asked to stop (SIGTERM) exits
promptly, whether it never reached the database or lost it while holding runs; such runs are left
to their leases and taken over once the database is back."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from fleet.store.db import connect
from tests.support import (
    Proc,
    env_for,
    log_events,
    one_run,
    processes,
    start_worker,
    ticker_cmd,
    wait_for,
    worker_cmd,
)


@contextmanager
def outage(server_url: str, db_url: str) -> Iterator[None]:
    """The test's database refuses new connections and loses its open ones until the block ends."""
    name = conninfo_to_dict(db_url)["dbname"]
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        try:
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')


def stop_and_time(p: Proc, timeout: float = 15) -> float:
    p.signal(signal.SIGTERM)
    sent = time.monotonic()
    assert p.wait(timeout=timeout) == 0, p.output()[-2000:]
    return time.monotonic() - sent


def test_processes_that_never_reached_the_database_stop_at_once(
    server_url: str, db_url: str, tmp_path: Path
) -> None:
    with processes() as procs, outage(server_url, db_url):
        t = Proc(ticker_cmd("--poll", "0.5"), env_for(db_url), tmp_path / "t.log")
        w = Proc(worker_cmd("--app", "fleet_test_jobs", "--poll", "0.5"), env_for(db_url), tmp_path / "w.log")
        procs += [t, w]
        for p in (t, w):
            wait_for(
                lambda p=p: any(e["event"] == "db_unavailable" for e in log_events(p)),  # type: ignore[misc]
                timeout=20,
                what="the process to find the database out of reach",
            )
        took = {name: stop_and_time(p) for name, p in (("ticker", t), ("worker", w))}
        outputs = [p.output().splitlines() for p in (t, w)]
    assert all(s < 2.5 for s in took.values()), took
    for lines in outputs:
        # Every line is an event: the connection pool's own warnings come as library_log lines.
        assert all(line.startswith("{") for line in lines), lines[:5]
    print(f"stop while the database is unreachable: {', '.join(f'{k} {v:.2f}s' for k, v in took.items())}")


def test_a_worker_losing_the_database_with_a_run_stops_after_its_grace_and_the_run_is_taken_over(
    server_url: str, db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 60 }")
    flags = ["--lease", "6", "--heartbeat", "1", "--poll", "0.5", "--grace", "1"]  # grace ends first
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *flags)
        wait_for(lambda: (tmp_path / "events.log").exists(), what="a to start the run")
        with outage(server_url, db_url):
            wait_for(
                lambda: any(e["event"] in ("db_error", "heartbeat_error") for e in log_events(a)),
                timeout=10,
                what="a to lose its connections",
            )
            took = stop_and_time(a)
        a_events = log_events(a)
        left = [e for e in a_events if e["event"] == "stopped_without_database"]
        conn.close()
        conn = connect(db_url, "fleet-tests")
        start_worker(procs, db_url, tmp_path, "b", *flags)
        wait_for(
            lambda: (
                conn.execute("SELECT attempts, locked_by FROM fleet.job_runs").fetchone()
                == {"attempts": 2, "locked_by": "b"}
            ),
            timeout=15,
            what="b to take the run over once a's lease ran out",
        )
    assert took < 1 + 2.5, took  # the grace period, then out, though nothing could be recorded
    assert left and left[0]["left_to_lease"] == 1, a_events[-5:]
    hist = conn.execute("SELECT attempt, worker_id, outcome FROM fleet.job_attempts").fetchall()
    assert hist == [{"attempt": 1, "worker_id": "a", "outcome": "lease_expired"}]
    conn.close()
    print(f"lost the database with a run: stopped {took:.2f}s after SIGTERM (grace 1 s); b took the run over")
