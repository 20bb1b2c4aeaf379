"""A pause holds a failing run's retries in a real worker: no attempt starts while the schedule is
paused, however many back-offs pass, and the resume wakes the worker for the next one at once
(its poll is far longer than the wait allowed)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import FAST, env_for, fleetctl_cmd, one_run, processes, scalar, start_worker, wait_for


def attempts(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, "SELECT count(*) FROM fleet.job_attempts"))


def fleetctl(db_url: str, *args: str) -> None:
    done = subprocess.run(
        fleetctl_cmd(*args), env=env_for(db_url), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_a_paused_schedule_retries_nothing_until_resumed(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "fail", retry='{ max_attempts = 50, base = "200ms", cap = "200ms" }')
    with processes() as procs:
        start_worker(procs, db_url, tmp_path, "a", *FAST, "--poll", "60")
        wait_for(lambda: attempts(conn) >= 2, timeout=15, what="the run to fail and retry")
        fleetctl(db_url, "pause", "s")
        time.sleep(0.5)  # an attempt begun before the pause ends (the job fails at once)
        held = attempts(conn)
        time.sleep(3)  # fifteen back-offs: none starts an attempt
        assert attempts(conn) == held
        row = conn.execute("SELECT status::text, failures FROM fleet.job_runs").fetchone()
        assert row is not None and row["status"] == "pending" and row["failures"] == held
        fleetctl(db_url, "resume", "s")
        wait_for(lambda: attempts(conn) > held, timeout=5, what="the resume to wake the worker for the retry")
