"""Handlers that end badly or never end cannot jam a worker: every ending is an attempt outcome, a
handler that ignores its cancellation is abandoned and its worker restarted, a command job is killed
with every process it started."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.worker.loop import EXIT_ABANDONED
from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    job_events,
    log_events,
    one_run,
    processes,
    scalar,
    start_worker,
    wait_for,
    worker_cmd,
)


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


def test_handlers_ignoring_their_timeout_are_abandoned_and_the_worker_restarts(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1d"\njob = "stubborn"\nargs = { seconds = 60, later = 0.1 }\n'
        'overlap = "allow"\ntimeout = "1s"\nretry = { base = "1s" }\nstart_at = "2099-01-01T00:00:00Z"\n',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, '2026-01-01'::timestamptz + make_interval(secs => g), job, args, 'allow', now() "
        "FROM fleet.schedules, generate_series(1, 2) g"
    )
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *FAST, "--concurrency", "2", "--abandon-after", "1")
        wait_for(lambda: len(job_events(tmp_path)) == 2, what="both handlers to start on a")
        start_worker(procs, db_url, tmp_path, "b", *FAST)
        # Both threads of a are stuck in handlers that ignore cancellation: a exits to be restarted.
        assert a.wait(15) == EXIT_ABANDONED, a.output()[-3000:]
        abandoned = [e for e in log_events(a) if e["event"] == "abandoned"]
        assert len(abandoned) == 2 and all("--abandon-after 1" in e["error"] for e in abandoned)
        stopped = [e for e in log_events(a) if e["event"] == "worker_stopped"]
        assert stopped and stopped[0]["abandoned"] == 2 and stopped[0]["exit_code"] == EXIT_ABANDONED
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 2,
            timeout=15,
            what="b to retry both runs",
        )
    hist = conn.execute(
        "SELECT attempt, worker_id, outcome FROM fleet.job_attempts ORDER BY scheduled_for, attempt"
    ).fetchall()
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in hist] == [
        (1, "a", "timeout"),
        (2, "b", "done"),
    ] * 2


def test_an_async_handler_ignoring_its_cancellation_is_abandoned_alike(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "async_stubborn", "{ seconds = 60 }", timeout='"1s"', retry='{ base = "1s" }')
    with processes() as procs:
        flags = ("--app", "fleet_async_test_jobs", *FAST)
        a = start_worker(
            procs, db_url, tmp_path, "a", *flags, "--async-concurrency", "1", "--abandon-after", "1"
        )
        assert a.wait(15) == EXIT_ABANDONED, a.output()[-3000:]
        assert [e[0] for e in job_events(tmp_path)] == ["start", "ignored"]
        start_worker(procs, db_url, tmp_path, "b", *flags)
        wait_for(
            lambda: outcomes(conn) == [(1, "timeout"), (2, "done")], timeout=15, what="b to retry the run"
        )
    assert (
        scalar(conn, "SELECT error FROM fleet.job_attempts WHERE outcome = 'timeout'") == "timed out after 1s"
    )


def tree_command(tmp: Path, kill_after: str) -> Path:
    """A command job whose shell starts a grandchild in a session of its own (setsid), both ignoring
    SIGTERM; each writes its pid to `tmp`."""
    (tmp / "grandchild.sh").write_text(f"trap '' TERM\necho $$ > {tmp}/grandchild\nexec sleep 300\n")
    (tmp / "child.sh").write_text(
        f"trap '' TERM\nsetsid sh {tmp}/grandchild.sh &\necho $$ > {tmp}/child\nsleep 300\n"
    )
    jobs = tmp / "jobs.toml"
    jobs.write_text(f'[[job]]\nname = "tree"\nargv = ["sh", "{tmp}/child.sh"]\nkill_after = "{kill_after}"\n')
    return jobs


def pids(tmp: Path) -> list[int]:
    files = [tmp / "child", tmp / "grandchild"]
    if not all(f.exists() and f.read_text().strip() for f in files):
        return []
    return [int(f.read_text()) for f in files]


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"  # a zombie has ended (its parent has yet to reap it)


def kill_leftovers(found: list[int]) -> None:
    for pid in found:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_timed_out_command_is_killed_with_the_processes_that_left_its_session(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    jobs = tree_command(tmp_path, "0.5s")
    one_run(conn, "tree", timeout='"1s"', retry="{ max_attempts = 1 }")
    found: list[int] = []
    try:
        with processes() as procs:
            cmd = worker_cmd("--jobs", str(jobs), "--id", "c", *FAST)
            procs.append(Proc(cmd, env_for(db_url), tmp_path / "c.log"))
            found = wait_for(lambda: pids(tmp_path), what="the command and its grandchild to start")
            assert Path(f"/proc/{found[1]}/stat").exists() and os.getsid(found[1]) != os.getsid(found[0])
            wait_for(lambda: outcomes(conn) == [(1, "dead")], timeout=10, what="the timeout")
            wait_for(lambda: all(gone(p) for p in found), timeout=5, what="every process of the tree to end")
    finally:
        kill_leftovers(found)


def test_a_stopping_worker_kills_its_command_trees(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    jobs = tree_command(tmp_path, "20s")  # longer than the worker waits for handed-back handlers
    one_run(conn, "tree")
    found: list[int] = []
    try:
        with processes() as procs:
            cmd = worker_cmd("--jobs", str(jobs), "--id", "c", *FAST, "--grace", "0")
            w = Proc(cmd, env_for(db_url), tmp_path / "c.log")
            procs.append(w)
            found = wait_for(lambda: pids(tmp_path), what="the command and its grandchild to start")
            w.signal(signal.SIGTERM)
            assert w.wait(15) == 0
            assert any(e["event"] == "commands_killed" for e in log_events(w))
            wait_for(lambda: all(gone(p) for p in found), timeout=5, what="every process of the tree to end")
        assert outcomes(conn) == [(1, "handed_back")]
    finally:
        kill_leftovers(found)
