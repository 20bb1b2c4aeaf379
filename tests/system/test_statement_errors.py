"""A database that answers a worker's rounds with an error for a while (a full disk, a broken trigger,
a privilege taken away): the worker neither exits nor floods its log. It says `db_error` once, keeps
trying, and serves the run as soon as the error clears."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import job_events, log_events, one_run, processes, scalar, start_worker, wait_for


def test_a_worker_rides_out_a_lasting_statement_error(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "noop")
    conn.execute(
        "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; "
        "END $$"
    )
    conn.execute(
        "CREATE TRIGGER disk_full BEFORE UPDATE ON fleet.job_runs FOR EACH ROW EXECUTE FUNCTION disk_full()"
    )
    with processes() as procs:
        w = start_worker(procs, db_url, tmp_path, "w", "--poll", "0.5")
        wait_for(lambda: any(e["event"] == "db_error" for e in log_events(w)), what="the first db_error")
        time.sleep(3)  # about three more failed rounds
        errors = [e for e in log_events(w) if e["event"] == "db_error"]
        assert w.popen.poll() is None, w.output()[-2000:]
        conn.execute("DROP TRIGGER disk_full ON fleet.job_runs")
        wait_for(
            lambda: scalar(conn, "SELECT status FROM fleet.job_runs") == "done", timeout=10, what="the run"
        )
    assert len(errors) == 1 and "No space left on device" in errors[0]["error"], errors
    assert [e[0] for e in job_events(tmp_path)] == ["done"], job_events(tmp_path)
