"""The embedded PostgreSQL only where it is asked for: `fleetctl up` starts it, the other commands use
it while that `up` runs in their directory (else exit 2), and `fleetctl down` stops what `up` runs or
left behind after a crash.

Every process a test starts is ended by pid when the test ends: `up`, its supervisord and children,
the embedded server (pg_ctl stop).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fleet.ops.control import Supervisor, SupervisorUnavailable, serverurl_from_config
from fleet.store.db import redact
from fleet.store.embedded import UpState, embedded_pid, read_pid, read_up_state, stop_embedded, up_running
from tests.support import ROOT, fleetctl_cmd, ticker_cmd, wait_for, worker_cmd

NO_DATABASE = "set FLEET_DATABASE_URL (or run fleetctl up)"
FAST = {"FLEET_LEASE": "2", "FLEET_HEARTBEAT": "0.5", "FLEET_POLL": "0.5", "FLEET_TICKER_POLL": "0.5"}


def bare_env(**extra: str) -> dict[str, str]:
    """The test's environment without any FLEET_* setting: no database is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    env.update(OTEL_TRACES_EXPORTER="none", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT / "tests" / "apps"))
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=bare_env(), capture_output=True, text=True, timeout=timeout)


def postgres_serving(d: Path) -> list[int]:
    """Pids of PostgreSQL servers whose command line names directory `d`."""
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if p.info["name"] == "postgres" and str(d) in " ".join(p.info["cmdline"] or []):
                found.append(p.pid)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie whose parent has not reaped it yet has ended)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def end_tree(pids: list[int]) -> None:
    """Kill these processes and their descendants, by pid."""
    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=10)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (unix sockets), readable by the embedded server's user (root runs
    PostgreSQL as another user)."""
    d = Path(tempfile.mkdtemp(prefix="fe", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Up:
    """`fleetctl up` started by a test in `cwd`; `end()` kills by pid whatever of it is left."""

    def __init__(self, cwd: Path, *flags: str) -> None:
        self.cwd = cwd
        self.log = cwd / "up.out"
        with open(self.log, "wb") as out:
            self.popen = subprocess.Popen(
                fleetctl_cmd("up", "--workers", "1", "--max-workers", "1", *flags),
                cwd=cwd,
                env=bare_env(**FAST),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pids = {self.popen.pid}

    def wait_ready(self) -> str:
        """Wait until the embedded server is up and announced; its URL."""

        def announced() -> UpState | None:
            s = read_up_state(self.cwd)
            return s if s is not None and s.url else None

        state = wait_for(announced, timeout=90, what="up to announce its database")
        pg = embedded_pid(self.cwd)
        assert state is not None and pg is not None
        self.pids.add(pg)
        sv = wait_for(
            lambda: read_pid(self.cwd / ".fleet" / "supervisord.pid"), timeout=60, what="supervisord"
        )
        assert sv is not None
        self.pids.add(sv)
        assert state.pid == self.popen.pid
        return str(state.url)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def end(self) -> None:
        end_tree(sorted(self.pids))
        if embedded_pid(self.cwd) is not None:
            stop_embedded(self.cwd)


def test_commands_in_a_directory_without_up_exit_2_and_start_nothing(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('[[schedule]]\nname = "s"\nevery = "1m"\njob = "noop"\n')
    commands = {
        "fleetctl status": fleetctl_cmd("status"),
        "fleetctl migrate": fleetctl_cmd("migrate"),
        "fleetctl apply": fleetctl_cmd("apply", "s.toml"),
        "fleet-ticker": ticker_cmd("--until-idle"),
        "fleet-worker": worker_cmd("--app", "fleet_test_jobs", "--until-idle"),
    }
    for name, argv in commands.items():
        r = run(argv, tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (name, r)
        assert lines[0].startswith(f"{name}: FLEET_DATABASE_URL: ") and NO_DATABASE in lines[0], (name, r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]  # no .fleet
    assert postgres_serving(tmp_path) == []


def test_up_serves_the_commands_of_its_directory_and_down_stops_what_a_killed_up_left(
    short_dir: Path,
) -> None:
    up = Up(short_dir)
    try:
        url = up.wait_ready()
        # While `up` runs, every command started here uses its server.
        status = run(fleetctl_cmd("status", "--json"), short_dir)
        assert status.returncode in (0, 1), status
        assert "demo-ping" in {s["name"] for s in json.loads(status.stdout)}
        ticker = run(ticker_cmd("--until-idle", "--log-format", "json"), short_dir)
        assert ticker.returncode == 0, ticker
        started = json.loads(ticker.stdout.splitlines()[0])
        assert started["event"] == "ticker_started" and started["database"] == redact(url)
        # A worker of jobs no schedule names: it finds nothing to claim and exits.
        worker = run(worker_cmd("--app", "fleet_test_jobs", "--until-idle", "--poll", "0.5"), short_dir)
        assert worker.returncode == 0, worker
        assert json.loads(worker.stdout.splitlines()[0])["database"] == redact(url)

        # `up` dies without cleaning up: its server is left, and no command uses it any more.
        server = embedded_pid(short_dir)
        up.popen.kill()
        up.popen.wait(10)
        wait_for(lambda: not up_running(short_dir), timeout=10, what="up's lock to be released")
        assert embedded_pid(short_dir) == server
        after = run(fleetctl_cmd("status"), short_dir)
        assert after.returncode == 2 and NO_DATABASE in after.stderr, after

        down = run(fleetctl_cmd("down"), short_dir, timeout=180)
        assert down.returncode == 0, down
        assert f"stopped the embedded PostgreSQL (pid {server})" in down.stdout, down
        assert postgres_serving(short_dir) == []
        left = [pid for pid in up.pids if alive(pid)]
        assert left == [], (left, down.stdout)

        again = run(fleetctl_cmd("down"), short_dir)
        assert again.returncode == 0 and "nothing runs in this directory" in again.stdout, again
    finally:
        up.end()


def test_down_stops_a_running_up_and_everything_it_started(short_dir: Path) -> None:
    up = Up(short_dir)
    try:
        up.wait_ready()
        down = run(fleetctl_cmd("down"), short_dir, timeout=180)
        assert down.returncode == 0, down
        assert f"stopped fleetctl up (pid {up.popen.pid})" in down.stdout, down
        assert up.popen.wait(10) == 0, up.output()
        assert postgres_serving(short_dir) == []
        assert [pid for pid in up.pids if alive(pid)] == [], up.output()
        assert read_up_state(short_dir) is None
    finally:
        up.end()


def test_down_stops_the_ticker_and_workers_of_a_killed_supervisord(short_dir: Path) -> None:
    # No schedules, so nothing to log: an orphan that writes a line to its dead supervisord's pipe
    # ends by itself, and this test is about those that do not.
    (short_dir / "none.toml").write_text("")
    up = Up(short_dir, "--schedules", "none.toml")
    try:
        up.wait_ready()
        sv = Supervisor(serverurl_from_config(short_dir / ".fleet" / "supervisord.conf"))

        def children() -> list[int]:
            with contextlib.suppress(SupervisorUnavailable):
                procs = sv.processes()
                if len(procs) == 3 and all(p.state == "RUNNING" for p in procs):
                    return [p.pid for p in procs]
            return []

        kids = wait_for(children, timeout=60, what="the ticker, the worker and the alert process to run")
        up.pids |= set(kids)
        sv_pid = read_pid(short_dir / ".fleet" / "supervisord.pid")
        assert sv_pid is not None
        # `up` frozen (it cannot clean up), supervisord killed: its ticker, worker and alert process
        # are orphans.
        up.popen.send_signal(signal.SIGSTOP)
        os.kill(sv_pid, signal.SIGKILL)
        wait_for(lambda: not alive(sv_pid), timeout=10, what="supervisord to die")
        up.popen.kill()
        up.popen.wait(10)
        assert all(alive(pid) for pid in kids)

        down = run(fleetctl_cmd("down"), short_dir, timeout=180)
        assert down.returncode == 0, down
        listed = ", ".join(map(str, sorted(kids)))
        assert f"stopped the fleet processes a killed supervisord left (pids {listed})" in down.stdout, down
        assert "stopped the embedded PostgreSQL" in down.stdout, down
        assert [pid for pid in up.pids if alive(pid)] == []
    finally:
        up.end()


def initdb_running(d: Path) -> bool:
    for p in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if p.info["name"] == "initdb" and str(d) in " ".join(p.info["cmdline"] or []):
                return True
    return False


def test_ctrl_c_while_the_embedded_database_initialises_is_one_line_and_leaves_nothing(
    short_dir: Path,
) -> None:
    # In a process group of its own, signalled as a terminal signals its foreground group.
    with open(short_dir / "up.out", "wb") as out:
        popen = subprocess.Popen(
            fleetctl_cmd("up", "--workers", "1"),
            cwd=short_dir,
            env=bare_env(**FAST),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: initdb_running(short_dir), timeout=60, interval=0.01, what="initdb to run")
        os.killpg(popen.pid, signal.SIGINT)
        assert popen.wait(timeout=30) == 130
        lines = (short_dir / "up.out").read_text().splitlines()
        assert lines == [
            "fleetctl up: starting the embedded PostgreSQL in .fleet/pgdata",
            "fleetctl up: interrupted",
        ]
        assert not initdb_running(short_dir) and postgres_serving(short_dir) == []
        assert not (short_dir / ".fleet" / "pgdata" / "PG_VERSION").exists()  # the next `up` starts afresh
        assert read_up_state(short_dir) is None and not up_running(short_dir)
    finally:
        end_tree([popen.pid])
        if embedded_pid(short_dir) is not None:
            stop_embedded(short_dir)


def test_up_whose_output_reader_goes_away_stops_everything_it_started(short_dir: Path) -> None:
    """`fleetctl up | head`: once `head` has its lines and exits, `up` stops as on Ctrl-C."""
    popen = subprocess.Popen(
        fleetctl_cmd("up", "--workers", "1", "--no-dashboard"),
        cwd=short_dir,
        env=bare_env(**FAST),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    pids = [popen.pid]
    try:
        assert popen.stdout is not None
        read: list[str] = []
        while not any("fleetctl up: supervisord (pid" in line for line in read):
            line = popen.stdout.readline().decode()
            assert line, read
            read.append(line)
        pids += [
            pid
            for pid in (embedded_pid(short_dir), read_pid(short_dir / ".fleet" / "supervisord.pid"))
            if pid
        ]
        assert len(pids) == 3, read
        popen.stdout.close()  # as `head` exits
        assert popen.wait(timeout=90) == 141
        assert postgres_serving(short_dir) == []
        assert [pid for pid in pids if alive(pid)] == []
        assert read_up_state(short_dir) is None
    finally:
        end_tree(pids)
        if embedded_pid(short_dir) is not None:
            stop_embedded(short_dir)
