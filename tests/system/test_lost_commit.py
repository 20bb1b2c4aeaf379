"""A claim whose commit was lost (a failover to an asynchronous replica, a restore to a point in
time): the run is back to pending with its old attempt number, so the next claim gives the same
number again, to another worker. The worker whose claim was lost must be fenced out all the same:
its heartbeat and its finish match the run only while it holds the lease itself. A worker that
claims again a run whose handler it still runs under the same attempt number goes on with that
handler instead of starting a second one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import (
    FAST,
    job_events,
    log_events,
    lose_the_claim,
    one_run,
    processes,
    scalar,
    start_worker,
    wait_for,
)


def test_a_worker_whose_claim_was_lost_is_fenced_when_another_gets_the_same_attempt_number(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 2 }")
    with processes() as procs:
        # a runs one handler at a time: busy with attempt 1, it claims nothing else.
        a = start_worker(procs, db_url, tmp_path, "a", *FAST, "--concurrency", "1")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="a to start the run")
        # b is up and idle before the claim is lost: woken by the notification, it claims the run
        # at once, while a learns of the loss only at its next heartbeat.
        start_worker(procs, db_url, tmp_path, "b", *FAST)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.processes WHERE id = 'b'") == 1,
            what="b to register",
        )
        lose_the_claim(conn)
        wait_for(
            lambda: scalar(conn, "SELECT status FROM fleet.job_runs") == "done",
            timeout=15,
            what="the run to be finished",
        )
        wait_for(
            lambda: any(e[0] in ("done", "cancelled") and e[3] == "a" for e in job_events(tmp_path)),
            timeout=10,
            what="a's handler to end",
        )
        a_events = [e["event"] for e in log_events(a)]
    events = [(e[0], e[2], e[3]) for e in job_events(tmp_path)]
    assert ("start", "1", "b") in events and ("done", "1", "b") in events, events
    assert ("cancelled", "1", "a") in events, events  # a's heartbeat no longer matched: given up
    assert "heartbeat_lost" in a_events, a_events
    history = conn.execute("SELECT attempt, worker_id, outcome FROM fleet.job_attempts").fetchall()
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in history] == [(1, "b", "done")]


def test_a_worker_that_claims_again_a_run_it_still_runs_does_not_run_it_twice(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 2 }")
    with processes() as procs:
        # Its heartbeat, every 2 s, comes after its claim: the lease it renews is the new claim's.
        a = start_worker(
            procs, db_url, tmp_path, "a", "--lease", "6", "--heartbeat", "2", "--concurrency", "2"
        )
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="a to start the run")
        lose_the_claim(conn)  # a has a free slot: it claims the run again, with the same attempt number
        wait_for(
            lambda: scalar(conn, "SELECT locked_by FROM fleet.job_runs") == "a",
            timeout=5,
            what="a to claim the run again",
        )
        wait_for(
            lambda: scalar(conn, "SELECT status FROM fleet.job_runs") == "done",
            timeout=15,
            what="the run to be finished",
        )
        time.sleep(0.3)
        a_events = [e["event"] for e in log_events(a)]
    events = [(e[0], e[2], e[3]) for e in job_events(tmp_path)]
    assert events == [("start", "1", "a"), ("done", "1", "a")], events
    assert "heartbeat_lost" not in a_events and "fenced" not in a_events, a_events
    assert a_events.count("claimed") == 1 and a_events.count("claimed_again") == 1, a_events
    history = conn.execute("SELECT attempt, worker_id, outcome FROM fleet.job_attempts").fetchall()
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in history] == [(1, "a", "done")]
