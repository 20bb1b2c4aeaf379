"""fleet under a real supervisord: the rendered configuration, `fleetctl up`, `fleetctl scale`, crashes.

Every process a test starts is ended by pid when the test ends, pass or fail: supervisord, its
children, `fleetctl up` and the embedded PostgreSQL an `up` started.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from fleet.ops.control import ProcInfo, Supervisor, SupervisorUnavailable, serverurl_from_config
from fleet.process.envfile import parse_env, render_env
from fleet.store.db import connect
from fleet.store.migrate import migrate
from tests.support import BIN, ROOT, apply_text, fleetctl_cmd, job_events, scalar, wait_for

FAST = {"FLEET_LEASE": "2", "FLEET_HEARTBEAT": "0.5", "FLEET_POLL": "0.5", "FLEET_TICKER_POLL": "0.5"}
EXAMPLES = ("demo-flaky", "demo-ping", "demo-report", "demo-resize")


# -- processes -------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def end_tree(pids: list[int], grace_s: float = 0.0) -> None:
    """End these processes and their descendants, by pid: SIGTERM first when grace_s > 0, then SIGKILL."""
    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
    if grace_s > 0:
        for p in procs[:1]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()
        psutil.wait_procs(procs[:1], timeout=grace_s)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=10)


def base_env(**extra: str) -> dict[str, str]:
    """The test's environment without any FLEET_* setting (so the env files are what counts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    env.update(OTEL_TRACES_EXPORTER="none", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def app_path() -> str:
    return os.pathsep.join([str(ROOT / "tests" / "apps"), str(ROOT)])


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix sockets live here (their paths are limited to ~107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="fl", dir="/tmp"))
    d.chmod(0o755)  # the embedded PostgreSQL runs as another user when the tests run as root
    yield d
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def supervisord(conf: Path, log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "supervisord"), "-n", "-c", str(conf)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        end_tree([proc.pid], grace_s=20)


def states(sv: Supervisor) -> dict[str, ProcInfo]:
    """Process name -> its state; empty while supervisord is not answering yet."""
    try:
        return {p.name: p for p in sv.processes()}
    except SupervisorUnavailable:
        return {}


def running(sv: Supervisor) -> dict[str, int]:
    """Running process name -> pid."""
    return {p.name: p.pid for p in states(sv).values() if p.state == "RUNNING"}


def wait_running(sv: Supervisor, n: int) -> dict[str, int]:
    """Wait until exactly `n` processes are RUNNING; returns them (name -> pid)."""
    wait_for(lambda: len(running(sv)) == n, timeout=30, what=f"{n} processes RUNNING")
    return running(sv)


def render_config(tmp: Path, run_dir: Path, *flags: str) -> Path:
    out = subprocess.run(
        fleetctl_cmd("supervisor-config", *flags, "--run-dir", str(run_dir)),
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    conf = tmp / "supervisord.conf"
    conf.write_text(out)
    return conf


# -- supervisor-config -----------------------------------------------------------------------------


@pytest.fixture
def empty_db(server_url: str) -> Iterator[str]:
    """A database with no schema at all (not even fleet's migrations)."""
    name = f"fleet_empty_{os.getpid()}"
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_url, dbname=name)
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_supervisor_config_runs_ticker_and_workers_which_wait_for_the_schema(
    empty_db: str, tmp_path: Path, short_dir: Path
) -> None:
    """supervisord accepts the output; processes started before `migrate` stay up, then do the work."""
    env_file = tmp_path / "fleet.env"
    env_file.write_text(
        render_env(
            {
                "FLEET_DATABASE_URL": empty_db,
                **FAST,
                "FLEET_TEST_DIR": str(tmp_path),
                "PYTHONPATH": app_path(),
            }
        )
    )
    conf = render_config(
        tmp_path,
        short_dir,
        "--workers",
        "3",
        "--max-workers",
        "4",
        "--app",
        "fleet_test_jobs",
        "--env-file",
        str(env_file),
        "--env-allow",
        "PYTHONPATH",
        "--logs",
        str(tmp_path),
        "--grace",
        "1",
    )
    started = time.monotonic()
    with supervisord(conf, tmp_path / "supervisord.out", base_env()) as proc:
        sv = Supervisor(serverurl_from_config(conf))
        first = wait_running(sv, 5)
        assert sorted(first) == ["alert_00", "ticker_00", "worker_00", "worker_01", "worker_02"]
        assert states(sv)["worker_03"].state == "STOPPED"  # a spare slot, for `fleetctl scale`
        time.sleep(2)  # a process that gave up on the missing schema would be restarting by now
        assert running(sv) == first, "no process may have exited while the schema was missing"

        with connect(empty_db, "test") as conn:
            migrate(conn)
            apply_text(conn, '[[schedule]]\nname = "tick"\nevery = "1s"\njob = "noop"\noverlap = "allow"\n')
            wait_for(
                lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") >= 5,
                timeout=30,
                what="runs getting done",
            )
            ids = {r["id"] for r in conn.execute("SELECT id FROM fleet.processes")}
            host = os.uname().nodename
            assert {f"{host}:worker_0{i}" for i in range(3)} | {f"{host}:ticker_00"} <= ids
            workers = {
                r["worker_id"] for r in conn.execute("SELECT DISTINCT worker_id FROM fleet.job_attempts")
            }
            assert workers <= {f"{host}:worker_0{i}" for i in range(3)}
        assert running(sv) == first and proc.poll() is None
        print(
            f"supervisor-config: ticker + 3 workers RUNNING and runs done {time.monotonic() - started:.1f}s "
            "after supervisord started (schema created meanwhile)"
        )
    assert (tmp_path / "worker_00.log").read_text().count('"event":"worker_started"') == 1


def test_worker_sigkilled_under_supervisord_is_restarted_and_its_run_finished(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, short_dir: Path
) -> None:
    env_file = tmp_path / "fleet.env"
    env_file.write_text(
        render_env(
            {"FLEET_DATABASE_URL": db_url, **FAST, "FLEET_TEST_DIR": str(tmp_path), "PYTHONPATH": app_path()}
        )
    )
    conf = render_config(
        tmp_path,
        short_dir,
        "--workers",
        "2",
        "--max-workers",
        "2",
        "--app",
        "fleet_test_jobs",
        "--env-file",
        str(env_file),
        "--env-allow",
        "PYTHONPATH",
        "--logs",
        str(tmp_path),
        "--grace",
        "1",
    )
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1d"\njob = "sleep"\nargs = { seconds = 2 }\n'
        'start_at = "2099-01-01T00:00:00Z"\n',
    )
    with supervisord(conf, tmp_path / "supervisord.out", base_env()):
        sv = Supervisor(serverurl_from_config(conf))
        before = wait_running(sv, 4)
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
            "SELECT name, date_trunc('second', now()), job, args, overlap, now() FROM fleet.schedules"
        )
        start = wait_for(
            lambda: [e for e in job_events(tmp_path) if e[0] == "start"], what="the run to start"
        )[0]
        victim_pid, victim = int(start[4]), start[3].split(":")[-1]
        assert before[victim] == victim_pid
        os.kill(victim_pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(
            lambda: running(sv).get(victim, victim_pid) != victim_pid,
            timeout=30,
            what="supervisord to restart the killed worker",
        )
        restarted = running(sv)
        restarted_after = time.monotonic() - killed
        wait_for(
            lambda: scalar(conn, "SELECT status::text FROM fleet.job_runs") == "done",
            timeout=30,
            what="the run to be finished by a worker",
        )
        finished_after = time.monotonic() - killed
        assert {k: v for k, v in restarted.items() if k != victim} == {
            k: v for k, v in before.items() if k != victim
        }
    hist = conn.execute("SELECT worker_id, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    assert [h["outcome"] for h in hist] == ["lease_expired", "done"]
    assert hist[0]["worker_id"].endswith(victim)
    assert [e[0] for e in job_events(tmp_path)].count("done") == 1
    print(
        f"SIGKILL under supervisord: {victim} restarted after {restarted_after:.1f}s, "
        f"its run finished {finished_after:.1f}s after the kill (lease 2s, job 2s)"
    )


# -- fleetctl up -----------------------------------------------------------------------------------


class Up:
    """`fleetctl up` started by a test in directory `cwd`, its output in a file."""

    def __init__(self, cwd: Path, env: dict[str, str], *flags: str) -> None:
        self.cwd = cwd
        self.log_path = cwd / "up.out"
        with open(self.log_path, "wb") as out:
            self.popen = subprocess.Popen(
                fleetctl_cmd("up", *flags), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.pids: set[int] = {self.popen.pid}  # everything it started, as the test learns of it

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def supervisor(self) -> Supervisor:
        return Supervisor(serverurl_from_config(self.cwd / ".fleet" / "supervisord.conf"))

    def learn_pids(self) -> None:
        sv_pid = wait_for(
            lambda: _pid_in(self.cwd / ".fleet" / "supervisord.pid"), what="supervisord's pid file"
        )
        assert sv_pid is not None
        self.pids.add(sv_pid)
        self.pids |= {p.pid for p in self.supervisor().processes() if p.pid}
        pg = _pid_in(self.cwd / ".fleet" / "pgdata" / "postmaster.pid")
        if pg:
            self.pids.add(pg)

    def end(self) -> None:
        """By pid: everything still alive is killed (and an embedded server it left is stopped)."""
        end_tree(sorted(self.pids))
        if (self.cwd / ".fleet" / "pgdata" / "postmaster.pid").exists():
            from fleet.store.embedded import stop_embedded

            stop_embedded(self.cwd)


def _pid_in(path: Path) -> int | None:
    try:
        first = path.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def test_up_in_an_empty_directory_runs_the_examples_and_ctrl_c_stops_everything(short_dir: Path) -> None:
    started = time.monotonic()
    up = Up(short_dir, base_env(), "--workers", "2", "--dashboard", "127.0.0.1:0")
    try:
        env_file = short_dir / ".fleet" / "fleet.env"
        wait_for(
            lambda: env_file.exists() and (short_dir / ".fleet" / "supervisord.pid").exists(),
            timeout=60,
            what="up to start supervisord",
        )
        url = parse_env(env_file.read_text())["FLEET_DATABASE_URL"]
        assert str(short_dir / ".fleet" / "pgdata") in url  # the embedded server of this directory
        up.learn_pids()
        with connect(url, "test") as conn:

            def all_done() -> bool:
                rows = conn.execute(
                    "SELECT schedule_name FROM fleet.job_runs WHERE status = 'done' GROUP BY schedule_name"
                ).fetchall()
                return {r["schedule_name"] for r in rows} == set(EXAMPLES)

            wait_for(
                all_done, timeout=60 - (time.monotonic() - started), what="every example schedule to run"
            )
            ready_after = time.monotonic() - started
            counts = {
                r["status"]: r["n"]
                for r in conn.execute(
                    "SELECT status::text, count(*) AS n FROM fleet.job_runs GROUP BY status"
                )
            }
        sv = up.supervisor()
        # The runs can all be done before supervisord counts the processes as started (startsecs).
        assert sorted(wait_running(sv, 4)) == ["alert_00", "ticker_00", "worker_00", "worker_01"]
        up.learn_pids()

        second = subprocess.run(
            fleetctl_cmd("up"), cwd=short_dir, env=base_env(), capture_output=True, text=True, timeout=30
        )
        assert second.returncode == 2 and "already up" in second.stderr, second
        wait_for(
            lambda: "schedule=demo-ping verdict=" in up.output(), timeout=15, what="the plain view lines"
        )
        # the web dashboard runs beside the live view, at the address up printed
        web = re.search(r"fleetctl up: dashboard: (http://\S+/)", up.output())
        assert web, up.output()
        with urllib.request.urlopen(web.group(1), timeout=10) as page:
            assert 'data-name="demo-ping"' in page.read().decode()

        up.popen.send_signal(signal.SIGINT)
        sent = time.monotonic()
        assert up.popen.wait(timeout=90) == 0, up.output()
        stopped_after = time.monotonic() - sent
        out = up.output()
        assert "this host: 1 ticker, 2 workers, 1 alert process" in out, out
        assert "fleetctl up: stopping 2 worker processes (" in out, out
        left = [pid for pid in up.pids if alive(pid)]
        assert left == [], f"processes left behind: {left}\n{up.output()}"
        assert not (short_dir / ".fleet" / "pgdata" / "postmaster.pid").exists()
    finally:
        up.end()
    print(
        f"up: every example schedule had a done run {ready_after:.1f}s after start ({counts}); "
        f"Ctrl-C stopped {len(up.pids)} processes in {stopped_after:.1f}s"
    )


def test_scale_up_and_down_keeps_the_others_and_runs_each_slot_once(
    db_url: str, conn: psycopg.Connection[Any], short_dir: Path
) -> None:
    (short_dir / "s.toml").write_text(
        '[[schedule]]\nname = "s"\nevery = "1s"\njob = "sleep"\n'
        'args = { seconds = 1.5 }\noverlap = "allow"\ncatchup = "all"\n'
    )
    env = base_env(
        FLEET_DATABASE_URL=db_url,
        FLEET_TEST_DIR=str(short_dir),
        # One run at a time per worker: a 1.5 s run every second keeps one of the first two workers
        # busy at each new slot, so the workers added by scaling win claims often, not by luck.
        FLEET_CONCURRENCY="1",
        # Slots only when due: when the ticker stops, the one worker left drains what is due, not
        # a minute of runs created ahead.
        FLEET_LOOKAHEAD="0",
        PYTHONPATH=app_path(),
        **FAST,
    )
    up = Up(
        short_dir,
        env,
        "--workers",
        "2",
        "--max-workers",
        "4",
        "--app",
        "fleet_test_jobs",
        "--schedules",
        "s.toml",
        "--grace",
        "0.2",
    )
    try:
        wait_for(lambda: (short_dir / ".fleet" / "supervisord.pid").exists(), timeout=30, what="supervisord")
        up.learn_pids()
        sv = up.supervisor()
        two = wait_running(sv, 4)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") >= 2,
            timeout=20,
            what="runs getting done",
        )

        scale = subprocess.run(
            fleetctl_cmd("scale", "4"), cwd=short_dir, env=env, capture_output=True, text=True, timeout=120
        )
        up.learn_pids()
        assert scale.returncode == 0, scale
        four = running(sv)
        assert sorted(four) == ["alert_00", "ticker_00", "worker_00", "worker_01", "worker_02", "worker_03"]
        assert {k: four[k] for k in two} == two  # the ticker and the first workers kept running
        wait_for(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(DISTINCT worker_id) FROM fleet.job_attempts "
                    "WHERE worker_id LIKE '%worker_02' OR worker_id LIKE '%worker_03'",
                )
                == 2
            ),
            timeout=20,
            what="the new workers to take runs",
        )

        scale = subprocess.run(
            fleetctl_cmd("scale", "1"), cwd=short_dir, env=env, capture_output=True, text=True, timeout=120
        )
        assert scale.returncode == 0, scale
        one = running(sv)
        assert sorted(one) == ["alert_00", "ticker_00", "worker_00"]
        assert one == {k: two[k] for k in ("alert_00", "ticker_00", "worker_00")}
        too_many = subprocess.run(
            fleetctl_cmd("scale", "5"), cwd=short_dir, env=env, capture_output=True, text=True, timeout=30
        )
        assert too_many.returncode == 2 and "4 worker slots" in too_many.stderr

        # Stop creating slots, then let the one worker drain what is left.
        sv.stop("fleet-ticker:ticker_00")
        wait_for(lambda: states(sv)["ticker_00"].state == "STOPPED", timeout=20, what="the ticker to stop")
        last = scalar(conn, "SELECT max(scheduled_for) FROM fleet.job_runs")
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status <> 'done'") == 0,
            timeout=60,
            what="every run to be done",
        )
        up.popen.send_signal(signal.SIGINT)
        assert up.popen.wait(timeout=60) == 0, up.output()
        assert [pid for pid in up.pids if alive(pid)] == []
    finally:
        up.end()

    runs = conn.execute("SELECT scheduled_for FROM fleet.job_runs ORDER BY scheduled_for").fetchall()
    first = runs[0]["scheduled_for"]
    # No slot lost: one run per second from the first to the last, all done...
    assert len(runs) == int((last - first).total_seconds()) + 1
    # ...and each done exactly once, however many workers came and went.
    done = [e[1] for e in job_events(short_dir) if e[0] == "done"]
    assert len(done) == len(set(done)) == len(runs)
    outcomes = {
        r["outcome"]: r["n"]
        for r in conn.execute("SELECT outcome, count(*) AS n FROM fleet.job_attempts GROUP BY outcome")
    }
    assert outcomes.get("done") == len(runs) and not outcomes.get("dead")
    print(f"scale 2 -> 4 -> 1: {len(runs)} runs, each done once; attempts by outcome {outcomes}")
