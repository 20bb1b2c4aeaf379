"""A zombie whose handler's wait ran out while it was stopped: on waking, the handler sees that its
attempt is cancelled (the lease ran out locally long ago, and another worker took the run over) before
it goes on to its side effect, without waiting for the heartbeat thread's next database round trip.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import Proc, apply_text, env_for, job_events, processes, wait_for, worker_cmd

FAST = ["--lease", "2", "--heartbeat", "0.5", "--poll", "0.5"]


def worker(procs: list[Proc], db_url: str, tmp: Path, wid: str) -> Proc:
    p = Proc(
        worker_cmd("--app", "fleet_test_jobs", "--id", wid, *FAST),
        env_for(db_url, FLEET_TEST_DIR=str(tmp)),
        tmp / f"{wid}.log",
    )
    procs.append(p)
    return p


def test_woken_zombie_handler_sees_its_attempt_cancelled(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1d"\njob = "sleep"\nargs = { seconds = 1 }\n'
        'start_at = "2099-01-01T00:00:00Z"\n',
    )
    conn.execute(
        "INSERT INTO job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, date_trunc('second', now()), job, args, overlap, now() FROM schedules"
    )
    with processes() as procs:
        a = worker(procs, db_url, tmp_path, "a")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        a.signal(signal.SIGSTOP)  # the handler's 1 s wait runs out while the process is stopped
        worker(procs, db_url, tmp_path, "b")
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
