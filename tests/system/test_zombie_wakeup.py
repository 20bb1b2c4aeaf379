"""Zombies: a worker stopped (SIGSTOP) while it holds a run, woken after another worker took the run
over. A handler whose wait ran out meanwhile sees its attempt cancelled before it goes on to its side
effect, without waiting for the heartbeat thread's next database round trip; a handler that had not
started yet is not started at all.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from fleet.store.db import connect
from tests.support import (
    FAST,
    job_events,
    log_events,
    one_run,
    processes,
    scalar,
    start_worker,
    wait_for,
)


def test_woken_zombie_handler_sees_its_attempt_cancelled(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 1 }")
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *FAST)
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        a.signal(signal.SIGSTOP)  # the handler's 1 s wait runs out while the process is stopped
        start_worker(procs, db_url, tmp_path, "b", *FAST)
        wait_for(
            lambda: any(e[0] == "done" and e[3] == "b" for e in job_events(tmp_path)),
            timeout=20,
            what="b to take the run over and finish it",
        )
        a.signal(signal.SIGCONT)
        wait_for(
            lambda: any(e[3] == "a" and e[0] in ("done", "cancelled") for e in job_events(tmp_path)),
            timeout=10,
            what="the zombie's handler to go on",
        )
        time.sleep(0.5)
    by_a = [e[0] for e in job_events(tmp_path) if e[3] == "a"]
    # Its lease ran out 2 s into a stop of several seconds: the handler must not carry on as if it held it.
    assert by_a == ["start", "cancelled"], by_a


def test_a_worker_stopped_while_its_claim_is_in_flight_does_not_start_the_run_on_waking(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 0.2 }")
    with processes() as procs, connect(db_url, "fleet-tests lock") as locker:
        # Hold the claim in the database: a's claim waits for the table lock, with its whole round
        # (through the closing Sync) already sent, so it commits while a is stopped.
        locker.autocommit = False
        locker.execute("LOCK TABLE fleet.job_runs IN EXCLUSIVE MODE")
        a = start_worker(procs, db_url, tmp_path, "a", *FAST)
        wait_for(
            lambda: scalar(
                conn,
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name LIKE 'fleet-worker a%%' AND wait_event_type = 'Lock'",
            ),
            what="a's claim to wait on the lock",
        )
        a.signal(signal.SIGSTOP)
        locker.commit()
        wait_for(
            lambda: scalar(conn, "SELECT locked_by FROM fleet.job_runs") == "a",
            what="a's claim to commit while a is stopped",
        )
        start_worker(procs, db_url, tmp_path, "b", *FAST)
        wait_for(
            lambda: scalar(conn, "SELECT status FROM fleet.job_runs") == "done",
            timeout=20,
            what="b to take the run over and finish it",
        )
        a.signal(signal.SIGCONT)
        wait_for(
            lambda: any(e["event"] == "heartbeat_lost" for e in log_events(a)),
            timeout=10,
            what="a to give its attempt up",
        )
        time.sleep(0.5)  # a started handler writes its start at once
        events = job_events(tmp_path)
    assert [(e[0], e[2], e[3]) for e in events] == [("start", "2", "b"), ("done", "2", "b")], events
    assert scalar(conn, "SELECT attempts FROM fleet.job_runs") == 2


def test_a_handler_still_running_after_its_run_was_retaken_does_not_hide_the_new_attempt(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Attempt 1's handler ignores cancellation: it is still running when its own worker, woken from
    a stop past the lease, takes the run over as attempt 2. When attempt 1's handler returns, the
    worker must go on renewing attempt 2's lease (both are held at once, one per handler thread)."""
    one_run(conn, "stubborn", "{ seconds = 4, later = 5 }")
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *FAST, "--concurrency", "2")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        a.signal(signal.SIGSTOP)
        time.sleep(2.6)  # past the 2 s lease
        a.signal(signal.SIGCONT)
        wait_for(
            lambda: scalar(conn, "SELECT status FROM fleet.job_runs") == "done",
            timeout=20,
            what="the run to be finished",
        )
        time.sleep(0.3)
    starts = [e[2] for e in job_events(tmp_path) if e[0] == "start"]
    assert starts == ["1", "2"], job_events(tmp_path)
    history = conn.execute("SELECT attempt, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "lease_expired"), (2, "done")]
