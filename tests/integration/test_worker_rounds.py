"""One Worker's rounds and heartbeats against the database, without its handler threads (what it
holds stays put between rounds): an attempt claimed again while the worker still holds it (the
database lost the commit of its claim: a failover to an asynchronous replica, a restore), and a
heartbeat after a pause past the lease's trust."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from fleet.jobs import JobContext
from fleet.process.settings import worker_settings
from fleet.store.pool import make_pool
from fleet.worker.attempt import Attempt
from fleet.worker.heartbeat import Heartbeat
from fleet.worker.loop import Worker
from tests.support import lose_the_claim, one_run, scalar


def noop(ctx: JobContext) -> None:
    pass


def worker(db_url: str) -> Worker:
    flags = ["--app", "fleet_test_jobs", "--id", "w", "--lease", "30", "--concurrency", "4"]
    flags += ["--database-url", db_url]
    return Worker(worker_settings(flags, {}), {"noop": noop})


def holding_one_run(db_url: str, conn: psycopg.Connection[Any]) -> tuple[Worker, Attempt]:
    """A worker that has claimed the one run there is, and the attempt it holds."""
    one_run(conn, "noop")
    w = worker(db_url)
    w.run_once(conn)
    (held,) = w.inflight.values()
    return w, held


def test_an_attempt_claimed_again_is_covered_by_the_one_held_or_handed_back(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    w, held = holding_one_run(db_url, conn)
    assert held.attempt == 1 and w.todo.qsize() == 1

    # Still running here: the new claim is the same attempt, its handler is not queued again.
    lose_the_claim(conn)
    assert w.run_once(conn).claimed == 1
    assert list(w.inflight.values()) == [held] and w.todo.qsize() == 1 and not w.to_record
    row = conn.execute(
        "SELECT status, attempts, locked_by, started_at, trace_id, span_id FROM fleet.job_runs"
    ).fetchone()
    assert row == {
        "status": "running",
        "attempts": 1,
        "locked_by": "w",
        # the running attempt's, not the repeated claim's: its history names the span exported
        "started_at": held.started_at,
        "trace_id": held.trace_id,
        "span_id": held.span_id,
    }

    # Given up here (fenced), its handler not yet returned: the new claim is handed back, and the
    # next round claims the run under a new attempt number.
    w.fence(held, "lease lost")
    lose_the_claim(conn)
    assert w.run_once(conn).claimed == 1
    assert [(a.attempt, o.outcome) for a, o in w.to_record] == [(1, "handed_back")]
    w.run_once(conn)
    assert sorted((a.attempt, a.state) for a in w.inflight.values()) == [(1, "fenced"), (2, "running")]
    assert scalar(conn, "SELECT attempts FROM fleet.job_runs") == 2
    history = conn.execute("SELECT attempt, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "handed_back")]


def test_a_heartbeat_after_a_pause_gives_up_what_it_no_longer_trusts(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    w, held = holding_one_run(db_url, conn)
    until = scalar(conn, "SELECT locked_until FROM fleet.job_runs")
    # The worker was paused past the trust it gives a lease; nobody took the run over meanwhile.
    held.lease_deadline_mono = time.monotonic() - 0.1
    with make_pool(w.url, "fleet-tests heartbeat", min_size=1, max_size=1) as pool:
        Heartbeat(w, pool, w.fence).beat()
    assert held.state == "fenced" and held.cancel.is_set()
    assert scalar(conn, "SELECT locked_until FROM fleet.job_runs") == until  # not renewed
