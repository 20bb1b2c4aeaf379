"""Shared test tools: applying schedule text, waiting on conditions, running fleet processes."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psycopg
from cronsim import CronSim

from fleet.admin.apply import ApplyResult, apply_specs
from fleet.store.registry import process_register
from fleet.timing.schedfile import load

ROOT = Path(__file__).resolve().parent.parent
# A worker's flags for multi-process tests: a short lease, heartbeat and poll (seconds, not minutes).
FAST = ["--lease", "2", "--heartbeat", "0.5", "--poll", "0.5"]
BIN = Path(sys.executable).parent
T = TypeVar("T")


def apply_text(conn: psycopg.Connection[Any], text: str, prune: bool = False, now: Any = None) -> ApplyResult:
    return apply_specs(conn, load(text), prune=prune, now=now)


def live_ticker(conn: psycopg.Connection[Any], at: Any = None, tid: str = "ticker-t") -> None:
    """A ticker in the process registry, seen at `at` (default: now), so that health read up to a
    minute after that instant finds a fleet whose slots are created, not NO-TICKER. A test that reads
    health at an instant of its own passes the latest of them."""
    process_register(conn, tid, "ticker")
    if at is not None:
        conn.execute("UPDATE fleet.processes SET seen_at = %s WHERE id = %s", (at, tid))


def wait_for(fn: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "") -> T:
    """Poll `fn` until it returns something truthy; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    last: T = fn()
    while not last:
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or fn}")
        time.sleep(interval)
        last = fn()
    return last


def free_port() -> int:
    """A loopback port free at the moment of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scalar(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def env_for(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    env.update(FLEET_DATABASE_URL=db_url, OTEL_TRACES_EXPORTER="none", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "apps"), str(ROOT)])
    env.update(extra)
    return env


def with_sigint(disposition: str, argv: list[str]) -> list[str]:
    """`argv` started with SIGINT at `disposition` ("default" or "ignored"), whatever this test run
    inherited: an ignored signal stays ignored across exec (as a shell's `cmd &` starts a program),
    a handled one is reset to the default. The program keeps the wrapper's pid."""
    action = {"default": "SIG_DFL", "ignored": "SIG_IGN"}[disposition]
    code = f"import os, signal, sys; signal.signal(signal.SIGINT, signal.{action}); os.execvp(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-S", "-c", code, *argv]


class Proc:
    """A fleet process started by a test; its output goes to a file the test can read. `sigint`
    starts it with SIGINT at that disposition (see `with_sigint`) rather than the test run's."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        prefix: list[str] | None = None,
        sigint: str | None = None,
    ) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        argv = [*(prefix or []), *argv]
        self.popen = subprocess.Popen(
            with_sigint(sigint, argv) if sigint else argv,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGCONT)
            self.popen.kill()
            self.popen.wait(10)
        self._log.close()

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")


def loading(p: Proc, library: str) -> bool:
    """Whether process `p` has begun to load the extension module `library` (it is mapped)."""
    try:
        return library in Path(f"/proc/{p.pid}/maps").read_text()
    except OSError:
        return False


@contextmanager
def processes() -> Iterator[list[Proc]]:
    """Every process appended to the yielded list is killed (by pid) when the block ends."""
    started: list[Proc] = []
    try:
        yield started
    finally:
        for p in started:
            p.stop()


def job_events(tmp: Path) -> list[list[str]]:
    """Lines the test jobs (tests/apps) write to `tmp`/events.log: event, idempotency key, attempt,
    worker id, pid, time."""
    f = tmp / "events.log"
    return [line.split() for line in f.read_text().splitlines()] if f.exists() else []


def log_events(p: Proc) -> list[dict[str, Any]]:
    """The JSON event lines `p` has written so far (a line still being written is skipped)."""
    out = []
    for line in p.output().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(orjson.JSONDecodeError):
                out.append(orjson.loads(line))
    return out


def ticker_cmd(*args: str) -> list[str]:
    return [str(BIN / "fleet-ticker"), *args]


def worker_cmd(*args: str) -> list[str]:
    return [str(BIN / "fleet-worker"), *args]


def fleetctl_cmd(*args: str) -> list[str]:
    return [str(BIN / "fleetctl"), *args]


def one_run(conn: psycopg.Connection[Any], job: str, args: str = "{}", **policies: str) -> None:
    """A schedule `s` far in the future plus one run of it due now (slot: this second)."""
    extra = "".join(f"{k} = {v}\n" for k, v in policies.items())
    apply_text(
        conn,
        f'[[schedule]]\nname = "s"\nevery = "1d"\njob = "{job}"\nargs = {args}\n'
        f'start_at = "2099-01-01T00:00:00Z"\n{extra}',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, date_trunc('second', now()), job, args, overlap, now() FROM fleet.schedules"
    )


def lose_the_claim(conn: psycopg.Connection[Any]) -> None:
    """Every running run as a replica promoted before its claim's commit reached it would have it
    (pending again, its attempt number one lower); idle workers are woken to look for runs."""
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'pending', attempts = attempts - 1, started_at = NULL, "
        "locked_by = NULL, locked_host = NULL, locked_pid = NULL, locked_until = NULL, "
        "trace_id = NULL, span_id = NULL WHERE status = 'running'"
    )
    conn.execute("UPDATE fleet.schedule_gates SET running_slot = NULL")
    conn.execute("NOTIFY fleet_runs")


def start_worker(
    procs: list[Proc], db_url: str, tmp: Path, wid: str, *flags: str, prefix: list[str] | None = None
) -> Proc:
    """A fleet-worker of the test jobs (their events in `tmp`/events.log), added to `procs`."""
    p = Proc(
        worker_cmd("--app", "fleet_test_jobs", "--id", wid, *flags),
        env_for(db_url, FLEET_TEST_DIR=str(tmp)),
        tmp / f"{wid}.log",
        prefix=prefix,
    )
    procs.append(p)
    return p


@contextmanager
def login_roles(
    server_url: str, db_url: str, kinds: tuple[str, ...], prefix: str
) -> Iterator[dict[str, str]]:
    """A login role granted each fleet role of `kinds` (`fleet_<kind>`), named after `prefix` and
    this process (unique to the test), and the URL of `db_url` for each; dropped afterwards. The
    fleet's roles must exist (`fleetctl migrate --roles`)."""
    from psycopg.conninfo import make_conninfo

    from fleet.store.db import connect

    names = {kind: f"{prefix}_{kind}_{os.getpid()}" for kind in kinds}
    with connect(server_url, "fleet-tests roles") as admin:
        for kind, name in names.items():
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')
            admin.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE fleet_{kind}')
    try:
        yield {kind: make_conninfo(db_url, user=name) for kind, name in names.items()}
    finally:
        with connect(server_url, "fleet-tests roles") as admin:
            for name in names.values():
                admin.execute(f'DROP ROLE IF EXISTS "{name}"')


# CPU seconds the calibration's walk takes on the machines the suite's CPU budgets were set on.
CALIBRATION_CPU_S = 0.05


@functools.cache
def slowness() -> float:
    """How many times slower this machine runs the scheduling code than the machines the suite's CPU
    budgets were set on (at least 1): the least CPU time of three walks of 4,000 cron slots, against
    CALIBRATION_CPU_S. A budget scaled by it still tells a bounded call (milliseconds) from an
    unbounded one (seconds to minutes) on a machine two or three times slower."""
    spent = []
    for _ in range(3):
        started = time.process_time()
        slots = CronSim("*/7 9-17 * * 1-5", datetime(2026, 1, 1, tzinfo=UTC))
        for _ in range(4000):
            next(slots)
        spent.append(time.process_time() - started)
    return max(1.0, min(spent) / CALIBRATION_CPU_S)
