"""Stop signals: workers, tickers and the metrics exporter stop at once, however many signals come and
whenever they come."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support import (
    FAST,
    Proc,
    env_for,
    fleetctl_cmd,
    free_port,
    loading,
    log_events,
    processes,
    ticker_cmd,
    wait_for,
    worker_cmd,
)

STARTED = ("worker_started", "ticker_started")


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
