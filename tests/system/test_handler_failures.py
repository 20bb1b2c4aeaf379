"""Handlers that end badly or never end cannot jam a worker: every ending is an attempt outcome, a
handler that ignores its cancellation is abandoned and its worker restarted, a command job is killed
with every process it started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import FAST, job_events, one_run, processes, scalar, start_worker, wait_for


def outcomes(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT attempt, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    return [(r["attempt"], r["outcome"]) for r in rows]


@pytest.mark.parametrize(
    ("job", "error"),
    [
        ("exits", "SystemExit: 3"),
        ("interrupted", "KeyboardInterrupt"),
        ("unprintable", "Unprintable: <unprintable: str() raised ValueError>"),
    ],
)
def test_any_ending_of_a_handler_is_an_attempt_outcome_and_its_thread_serves_on(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, job: str, error: str
) -> None:
    one_run(conn, job, retry='{ max_attempts = 2, base = "1s" }')
    with processes() as procs:
        w = start_worker(procs, db_url, tmp_path, "a", *FAST, "--concurrency", "1")
        # The second attempt runs on the one handler thread there is: the first did not end it.
        wait_for(lambda: outcomes(conn) == [(1, "failed"), (2, "dead")], timeout=20, what="failed, then dead")
        row = conn.execute("SELECT status::text, failures, last_error FROM fleet.job_runs").fetchone()
        assert row is not None and (row["status"], row["failures"]) == ("dead", 2)
        assert row["last_error"].startswith(error), row["last_error"]
        assert [e[0] for e in job_events(tmp_path)] == ["start", "start"]
        # And it serves the next run.
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after) "
            "VALUES ('s', now(), 'noop', now())"
        )
        conn.execute("NOTIFY fleet_runs")
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 1,
            timeout=10,
            what="the next run done",
        )
        assert w.popen.poll() is None
