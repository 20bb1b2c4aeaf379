"""Connections dropped under a running worker (the server ends its backends, as an administrator, a
pooler or a failover does): the worker reconnects by itself, keeps its leases through it, and the run
is recorded once, on its first attempt, with no try spent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import FAST, job_events, log_events, one_run, processes, scalar, start_worker, wait_for


def drop_connections(conn: psycopg.Connection[Any], app: str) -> int:
    """End the backends of the processes whose application name starts with `app`."""
    return int(
        scalar(
            conn,
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
            (app + "%",),
        )
    )


def test_a_worker_whose_connections_are_dropped_keeps_its_run(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 4 }")
    with processes() as procs:
        w = start_worker(procs, db_url, tmp_path, "w", *FAST)
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="the run to start")
        dropped = []
        for _ in range(4):  # every connection of the worker, four times over the 2 s lease
            time.sleep(0.6)
            dropped.append(drop_connections(conn, "fleet-worker w"))
        wait_for(
            lambda: scalar(conn, "SELECT status FROM fleet.job_runs") == "done",
            timeout=20,
            what="the run to finish",
        )
        row = conn.execute("SELECT attempts, failures, locked_by FROM fleet.job_runs").fetchone()
        # The worker still serves new runs, woken by its listener's new connection.
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
            "SELECT name, date_trunc('second', now()) + interval '1 second', job, '{\"seconds\": 0}', "
            "overlap, now() FROM fleet.schedules"
        )
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 2,
            timeout=10,
            what="a new run to be served after the drops",
        )
        events = log_events(w)
    # The first drop ends the pool's two connections and the listener's; the later ones end those
    # reopened since (the pool reopens its own at once, the listener after a second).
    assert dropped[0] == 3 and sum(dropped[1:]) >= 2, dropped
    assert row is not None and (row["attempts"], row["failures"]) == (1, 0), row
    assert [e[0] for e in job_events(tmp_path)] == ["start", "done", "start", "done"]
    names = [e["event"] for e in events]
    assert "heartbeat_lost" not in names and "fenced" not in names, names
    assert "db_error" in names or "heartbeat_error" in names, names
