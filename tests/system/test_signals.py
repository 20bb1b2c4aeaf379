"""Stop signals: workers, tickers and the metrics exporter stop at once, however many signals come and
whenever they come; a second Ctrl-C forces a stopping worker out in time."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from fleet.store.db import connect
from fleet.worker.cli import FORCE_EXIT_S
from tests.support import (
    FAST,
    Proc,
    env_for,
    fleetctl_cmd,
    free_port,
    job_events,
    loading,
    log_events,
    one_run,
    processes,
    start_worker,
    ticker_cmd,
    wait_for,
    worker_cmd,
)

STARTED = ("worker_started", "ticker_started")
# A forced worker is gone within FORCE_EXIT_S of the second Ctrl-C; the slack is for a loaded machine.
FORCE_BOUND_S = FORCE_EXIT_S + 2.5


def logged(p: Proc, *events: str) -> bool:
    """Whether `p` has written a line of one of `events`."""
    return any(e["event"] in events for e in log_events(p))


def burst(pid: int, sig: int, count: int = 300) -> None:
    """`count` signals, 0 to 90 µs apart: some come while the process handles an earlier one."""
    for i in range(count):
        os.kill(pid, sig)
        end = time.perf_counter() + (i % 10) * 10e-6
        while time.perf_counter() < end:
            pass


def hung_after_bursts(procs: list[Proc]) -> list[str]:
    """Send each process a burst (SIGTERM and SIGINT in turn); the names of those still running 5 s
    after theirs. The exit code is not read: a signal of the burst may still come after a clean stop
    and kill the exiting process."""
    hung = []
    for i, p in enumerate(procs):
        burst(p.pid, signal.SIGTERM if i % 2 == 0 else signal.SIGINT)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            hung.append(p.log_path.stem)
    return hung


def test_bursts_of_stop_signals_stop_workers_and_tickers(db_url: str, tmp_path: Path) -> None:
    # A signal handler that logged and set events took locks in the main thread: a second signal
    # coming while the first was handled hung two to six of this test's workers for good.
    with processes() as procs:
        for i in range(6):
            procs.append(
                Proc(
                    worker_cmd("--app", "fleet_test_jobs", "--id", f"w{i}", *FAST),
                    env_for(db_url, FLEET_TEST_DIR=str(tmp_path)),
                    tmp_path / f"w{i}.log",
                )
            )
        for i in range(2):
            procs.append(Proc(ticker_cmd("--poll", "0.2"), env_for(db_url), tmp_path / f"t{i}.log"))
        for p in procs:
            wait_for(functools.partial(logged, p, *STARTED), what=p.log_path.stem)
        time.sleep(0.5)
        hung = hung_after_bursts(procs)
        assert not hung, f"did not stop within 5 s of the signals: {hung}"
        for i, p in enumerate(procs):
            events = [e["event"] for e in log_events(p)]
            assert events.count("stop_requested") == 1, (p.log_path.stem, events)
            assert ("worker_stopped" if i < 6 else "ticker_stopped") in events, (p.log_path.stem, events)


def test_bursts_of_stop_signals_stop_the_metrics_exporter(db_url: str, tmp_path: Path) -> None:
    # Its handler set an event: a second signal coming while the first one held the event's lock
    # hung two of this test's four exporters.
    with processes() as procs:
        for i in range(4):
            procs.append(
                Proc(
                    fleetctl_cmd("metrics", "--listen", f"127.0.0.1:{free_port()}"),
                    env_for(db_url),
                    tmp_path / f"m{i}.log",
                )
            )
        for p in procs:
            wait_for(functools.partial(logged, p, "metrics_started"), what=p.log_path.stem)
        hung = hung_after_bursts(procs)
        assert not hung, f"did not stop within 5 s of the signals: {hung}"
        assert all(logged(p, "metrics_stopped") for p in procs)


def test_workers_and_tickers_started_with_sigint_ignored_still_stop_on_it(
    db_url: str, tmp_path: Path
) -> None:
    """As a shell's `cmd &` starts them: SIGINT inherited ignored. Each installs its own handling: a
    Ctrl-C while it loads is one line and exit 130, and once it runs, a graceful stop (exit 0)."""
    commands = {
        "fleet-worker": worker_cmd("--app", "fleet_test_jobs", *FAST),
        "fleet-ticker": ticker_cmd("--poll", "0.2"),
    }
    env = env_for(db_url, FLEET_TEST_DIR=str(tmp_path))
    with processes() as procs:
        for name, argv in commands.items():
            starting = Proc(argv, env, tmp_path / f"{name}-loading.log", sigint="ignored")
            running = Proc(argv, env, tmp_path / f"{name}.log", sigint="ignored")
            procs += [starting, running]
            wait_for(
                functools.partial(loading, starting, "psycopg_binary"),
                timeout=10,
                interval=0.001,
                what="load",
            )
            starting.signal(signal.SIGINT)
            assert starting.wait(timeout=15) == 130, starting.output()
            assert starting.output().splitlines() == [f"{name}: interrupted"]

            wait_for(functools.partial(logged, running, *STARTED), what=name)
            running.signal(signal.SIGINT)
            assert running.wait(timeout=15) == 0, running.output()
            stops = [e for e in log_events(running) if e["event"] == "stop_requested"]
            assert [e["signal"] for e in stops] == ["SIGINT"], running.output()


def stopping_then_forced(p: Proc, conn: psycopg.Connection[Any]) -> float:
    """Ctrl-C once: the worker says how to force and goes on with its run (its grace period is long);
    Ctrl-C again: returns how long the worker took to exit after it (asserting exit code 130)."""
    p.signal(signal.SIGINT)
    wait_for(functools.partial(logged, p, "stopping"), what="the worker to begin stopping")
    (requested,) = [e for e in log_events(p) if e["event"] == "stop_requested"]
    assert requested["message"] == "stopping, press Ctrl-C again to force"
    assert p.popen.poll() is None  # the grace period (60 s) holds it
    assert conn.execute("SELECT status::text AS s FROM fleet.job_runs").fetchone() == {"s": "running"}
    p.signal(signal.SIGINT)
    sent = time.monotonic()
    assert p.wait(timeout=30) == 130, p.output()[-2000:]
    took = time.monotonic() - sent
    forced = [e for e in log_events(p) if e["event"] == "stop_forced"]
    assert len(forced) == 1 and forced[0]["running"] == 1, p.output()[-2000:]
    return took


def test_a_second_ctrl_c_forces_a_stopping_worker_out_and_its_run_is_handed_back(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The handler ignores its cancellation for a minute, and the grace period is a minute too.
    one_run(conn, "stubborn", "{ seconds = 60 }")
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *FAST, "--grace", "60")
        wait_for(lambda: job_events(tmp_path), what="a to start the run")
        took = stopping_then_forced(a, conn)
        run = conn.execute(
            "SELECT status::text AS status, last_outcome, failures FROM fleet.job_runs"
        ).fetchone()
        stopped = [e for e in log_events(a) if e["event"] == "worker_stopped"]
    assert took < FORCE_BOUND_S, took
    # Handed back at once, at no cost to the retry budget: another worker retakes it without waiting.
    assert run == {"status": "pending", "last_outcome": "handed_back", "failures": 0}
    # Its exit line counts it handed back, not failed.
    assert len(stopped) == 1, stopped
    counts = {k: stopped[0][k] for k in ("done", "failed", "dead", "handed_back", "fenced")}
    assert counts == {"done": 0, "failed": 0, "dead": 0, "handed_back": 1, "fenced": 0}, stopped
    print(f"a second Ctrl-C: the worker exited {took:.2f}s after it, its run handed back")


def test_a_forced_worker_that_cannot_hand_back_ends_in_time_and_its_run_is_retaken_by_lease(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "stubborn", "{ seconds = 60, later = 0 }")
    with processes() as procs:
        a = start_worker(procs, db_url, tmp_path, "a", *FAST, "--grace", "60")
        wait_for(lambda: job_events(tmp_path), what="a to start the run")
        with connect(db_url, "fleet-tests lock") as holder:
            # The run's row locked: the hand-back (and heartbeats) wait on it, for ever.
            holder.autocommit = False
            holder.execute("SELECT 1 FROM fleet.job_runs FOR UPDATE")
            took = stopping_then_forced(a, conn)
            # Its statements still wait on the server: end them, as its death would once noticed.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'fleet-worker a%'"
            )
            holder.rollback()
        start_worker(procs, db_url, tmp_path, "b", *FAST)
        wait_for(
            lambda: (
                conn.execute("SELECT status::text AS s, attempts, locked_by FROM fleet.job_runs").fetchone()
                in (
                    {"s": "running", "attempts": 2, "locked_by": "b"},
                    {"s": "done", "attempts": 2, "locked_by": None},
                )
            ),
            timeout=20,
            what="b to take the run over once a's lease ran out",
        )
    assert took < FORCE_BOUND_S, took
    hist = conn.execute(
        "SELECT attempt, worker_id, outcome FROM fleet.job_attempts WHERE attempt = 1"
    ).fetchall()
    assert hist == [{"attempt": 1, "worker_id": "a", "outcome": "lease_expired"}]
    print(f"a second Ctrl-C while the hand-back waits on a lock: exited {took:.2f}s after it")
