"""A run handed back on graceful shutdown is retaken at once by an idle worker, not at its next poll.

The hand-back wakes idle workers (NOTIFY), so the run does not wait for their next poll. Under a
steady load the ticker's NOTIFY for new slots would hide such a wait, so this test runs no ticker.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import job_events, one_run, processes, scalar, start_worker, wait_for


def test_handed_back_run_is_retaken_without_waiting_for_a_poll(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 30 }")
    flags = ["--lease", "20", "--heartbeat", "2", "--poll", "5", "--grace", "0.2"]
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *flags)
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="a to start the run")
        start_worker(procs, db_url, tmp_path, "b", *flags)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.processes WHERE id = 'b'"),
            what="b to be up",
        )
        time.sleep(0.5)  # b has looked for work, found none, and sleeps
        a.signal(signal.SIGTERM)
        stopped = time.monotonic()
        wait_for(
            lambda: any(e[0] == "start" and e[3] == "b" for e in job_events(tmp_path)),
            timeout=20,
            what="b to retake the handed-back run",
        )
        retaken_after = time.monotonic() - stopped
        assert a.wait(10) == 0
    # grace 0.2 s, then the hand-back: an idle worker should start the run well within a second.
    assert retaken_after < 1.5, f"retaken {retaken_after:.1f} s after SIGTERM (poll 5 s)"
