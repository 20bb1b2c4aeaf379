"""What a job leaves behind cannot outlive its attempt or hold its worker: a command that daemonises
is ended whole, a worker that abandoned a handler exits whatever threads or processes handlers left,
and a copy of the worker forked by a handler ends when the handler returns in it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.process.process_tree import start_time
from fleet.worker.loop import EXIT_ABANDONED
from tests.support import (
    FAST,
    Proc,
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


@pytest.fixture
def strays() -> Iterator[list[tuple[int, int]]]:
    """(pid, start time) of processes a test's jobs started; those still alive at its end are killed."""
    found: list[tuple[int, int]] = []
    yield found
    for pid, st in found:
        if start_time(pid) == st:
            os.kill(pid, signal.SIGKILL)


def pid_in(f: Path, what: str) -> tuple[int, int]:
    """The pid a process writes to `f`, with its start time, once it is there."""

    def read() -> tuple[int, int] | None:
        text = f.read_text().strip() if f.exists() else ""
        st = start_time(int(text)) if text else None
        return (int(text), st) if text and st is not None else None

    found = wait_for(read, what=what)
    assert found is not None
    return found


def reaped(pid: int, st: int) -> bool:
    """Whether process `pid` started at `st` has ended and been reaped: not even a zombie is left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return int(stat[stat.rindex(b")") + 2 :].split()[19]) != st  # a later process given its pid


def outcomes(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT attempt, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    return [(r["attempt"], r["outcome"]) for r in rows]


@pytest.mark.parametrize("cancelled_by", ["timeout", "lease lost", "worker stopping", "worker killed"])
def test_a_command_that_daemonises_is_ended_whole_when_its_attempt_is_cancelled(
    db_url: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    strays: list[tuple[int, int]],
    cancelled_by: str,
) -> None:
    # A double fork: the subshell starts `sleep 1000` in a session of its own and exits at once, so
    # the sleep is an orphan (and out of the command's process group) before anyone can look.
    script = f"( setsid sh -c 'echo $$ > {tmp_path}/daemon; exec sleep 1000' & ) ; exec sleep 300"
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[[job]]\nname = "daemon"\nargv = ["sh", "-c", "{script}"]\nkill_after = "0.5s"\n')
    timeout = '"1s"' if cancelled_by == "timeout" else '"1h"'
    one_run(conn, "daemon", timeout=timeout, retry="{ max_attempts = 1 }")
    with processes() as procs:
        w = Proc(
            worker_cmd("--jobs", str(jobs), "--id", "c", *FAST, "--grace", "0"),
            env_for(db_url),
            tmp_path / "c.log",
        )
        procs.append(w)
        daemon = pid_in(tmp_path / "daemon", "the daemonised sleep")
        strays.append(daemon)
        if cancelled_by == "lease lost":
            # Another worker took the run over: the heartbeat finds the attempt fenced.
            conn.execute("UPDATE fleet.job_runs SET attempts = attempts + 1, locked_by = 'other'")
            wait_for(
                lambda: any(e["event"] == "heartbeat_lost" for e in log_events(w)), what="the lost lease"
            )
        elif cancelled_by == "worker stopping":
            w.signal(signal.SIGTERM)
            assert w.wait(15) == 0
        elif cancelled_by == "worker killed":
            w.signal(signal.SIGKILL)  # the command's keeper gets its parent-death signal
        wait_for(lambda: reaped(*daemon), timeout=10, what="the daemonised sleep ended and reaped")
        assert w.popen.poll() is None or cancelled_by.startswith("worker")
    expected = {
        "timeout": [(1, "dead")],
        "lease lost": [],
        "worker stopping": [(1, "handed_back")],
        "worker killed": [],
    }
    assert outcomes(conn) == expected[cancelled_by]


def test_a_command_whose_keeper_is_killed_fails_and_is_ended(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, strays: list[tuple[int, int]]
) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        f'[[job]]\nname = "cmd"\nargv = ["sh", "-c", "echo $$ > {tmp_path}/cmd; exec sleep 300"]\n'
        'kill_after = "0.5s"\n'
    )
    one_run(conn, "cmd", retry="{ max_attempts = 1 }")
    with processes() as procs:
        w = Proc(worker_cmd("--jobs", str(jobs), "--id", "c", *FAST), env_for(db_url), tmp_path / "c.log")
        procs.append(w)
        cmd = pid_in(tmp_path / "cmd", "the command")
        strays.append(cmd)
        stat = Path(f"/proc/{cmd[0]}/stat").read_text()
        keeper = int(stat[stat.rindex(")") + 2 :].split()[1])
        assert keeper != w.pid  # the command's parent is its keeper, a child of the worker
        os.kill(keeper, signal.SIGKILL)  # as a hostile command of the same user could
        wait_for(lambda: outcomes(conn) == [(1, "dead")], what="the attempt failed")
        wait_for(lambda: start_time(cmd[0]) != cmd[1], timeout=5, what="the command ended")
        error = scalar(conn, "SELECT last_error FROM fleet.job_runs")
        assert "the command's keeper process ended unexpectedly (code -9)" in error, error


@pytest.mark.parametrize("job", ["leaves_thread", "leaves_process"])
def test_an_abandoned_worker_exits_though_a_handler_left_a_thread_or_a_process_running(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, strays: list[tuple[int, int]], job: str
) -> None:
    # The handler starts a non-daemon thread (or multiprocessing child) that never ends, then ignores
    # its timeout: Python's own exit would wait for that thread or child for ever.
    child = tmp_path / "child"
    one_run(conn, job, f'{{ seconds = 60, pid_file = "{child}" }}', timeout='"1s"')
    with processes() as procs:
        flags = ("--app", "fleet_leaky_jobs", *FAST, "--abandon-after", "1", "--grace", "1")
        w = start_worker(procs, db_url, tmp_path, "a", *flags)
        wait_for(lambda: job_events(tmp_path), what="the handler to start")
        if job == "leaves_process":
            strays.append(pid_in(child, "the multiprocessing child"))
        started = time.monotonic()
        # Timed out after 1 s, abandoned 1 s later, then a stop with nothing else to wait for.
        assert w.wait(15) == EXIT_ABANDONED, w.output()[-3000:]
        took = time.monotonic() - started
        stopped = [e for e in log_events(w) if e["event"] == "worker_stopped"]
        assert stopped and stopped[0]["exit_code"] == EXIT_ABANDONED  # written before the exit
    assert took < 8, took
    assert outcomes(conn) == [(1, "timeout")]


def test_a_copy_of_the_worker_forked_by_a_handler_ends_when_the_handler_returns_in_it(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, strays: list[tuple[int, int]]
) -> None:
    one_run(conn, "forks", "{ wait = 5 }")
    with processes() as procs:
        w = start_worker(procs, db_url, tmp_path, "f", "--app", "fleet_leaky_jobs", *FAST)
        wait_for(
            lambda: scalar(conn, "SELECT status::text FROM fleet.job_runs") == "done", what="the run done"
        )
        events = {e[0]: int(e[4]) for e in job_events(tmp_path)}  # event -> pid that recorded it
        child = events["child"]
        st = start_time(child)
        if st is not None:
            strays.append((child, st))
        # The copy ended at once, with the code of a script that returned, and its parent reaped it.
        assert "reaped:0" in events, events
        assert events["reaped:0"] == w.pid and child != w.pid
        assert st is None
        # Only the worker holds its database sessions: once it is killed they all end (a copy would
        # hold its connections, LISTEN included, open for as long as it lived).
        sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'fleet-worker f%%'"
        assert scalar(conn, sessions) >= 2
        w.signal(signal.SIGKILL)
        w.wait(10)
        wait_for(lambda: scalar(conn, sessions) == 0, timeout=10, what="the worker's sessions to end")
        assert "a process forked by the handler came back from it; it exits with code 0" in w.output()
