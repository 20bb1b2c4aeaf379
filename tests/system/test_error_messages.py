"""Errors that name their cause, read from the output of real processes: a server out of reach
(host:port and why), a database not migrated (run fleetctl migrate), an --app module that fails to
import (one line, the traceback only under --debug), Ctrl-C during fleetctl apply (exit 130, rolled
back)."""

from __future__ import annotations

import functools
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from fleet.store.db import connect
from tests.support import (
    Proc,
    apply_text,
    env_for,
    fleetctl_cmd,
    free_port,
    loading,
    log_events,
    processes,
    scalar,
    ticker_cmd,
    wait_for,
    worker_cmd,
)


def first_event(p: Proc, name: str) -> dict[str, Any]:
    found = wait_for(
        lambda: [e for e in log_events(p) if e["event"] == name], timeout=20, what=f"a {name} line of {p.pid}"
    )
    return found[0]


def stop(p: Proc) -> int:
    p.signal(signal.SIGTERM)
    return p.wait(timeout=15)


def test_worker_and_ticker_name_a_refused_server_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    with processes() as procs:
        w = Proc(worker_cmd("--app", "fleet_test_jobs", "--poll", "0.5"), env_for(url), tmp_path / "w.log")
        t = Proc(ticker_cmd("--poll", "0.5"), env_for(url), tmp_path / "t.log")
        procs += [w, t]
        for p in (w, t):
            e = first_event(p, "db_unavailable")
            assert e["error"] == f"cannot connect to 127.0.0.1:{port}: connection refused", e
        # The reconnecting pool's own line per attempt is not repeated in the log.
        w.popen.send_signal(signal.SIGTERM)
        assert w.wait(15) == 0 and stop(t) == 0
        for p in (w, t):
            lines = p.output().splitlines()
            assert all(line.startswith("{") for line in lines), lines
            assert not [e for e in log_events(p) if e["event"] == "library_log"], lines


@pytest.fixture
def empty_db(server_url: str) -> Iterator[str]:
    """A database without fleet's schema."""
    name = f"fleet_unmigrated_{free_port()}"
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_url, dbname=name)
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_worker_and_ticker_say_to_migrate_and_start_once_migrated(empty_db: str, tmp_path: Path) -> None:
    with processes() as procs:
        w = Proc(
            worker_cmd("--app", "fleet_test_jobs", "--poll", "0.5"), env_for(empty_db), tmp_path / "w.log"
        )
        t = Proc(ticker_cmd("--poll", "0.5"), env_for(empty_db), tmp_path / "t.log")
        procs += [w, t]
        for p in (w, t):
            e = first_event(p, "db_error")
            assert e["error"] == "the database has no fleet schema; run `fleetctl migrate`", e
        migrated = subprocess.run(
            fleetctl_cmd("migrate"), env=env_for(empty_db), capture_output=True, text=True, timeout=60
        )
        assert migrated.returncode == 0, migrated
        with connect(empty_db, "test") as conn:
            wait_for(
                lambda: scalar(conn, "SELECT count(*) FROM fleet.processes") == 2,
                what="both processes to register once the schema exists",
            )
        assert stop(w) == 0 and stop(t) == 0


BROKEN_APPS = {
    "bad_syntax": ("def handler(:\n", "SyntaxError: "),
    "bad_import": (
        "import no_such_dependency_of_this_app\n",
        "No module named 'no_such_dependency_of_this_app'",
    ),
    "bad_twice": (
        "import fleet\n\n@fleet.job('dup')\ndef a(ctx): pass\n\n@fleet.job('dup')\ndef b(ctx): pass\n",
        "ValueError: job 'dup' is registered twice",
    ),
}


@pytest.mark.parametrize("module", BROKEN_APPS)
def test_an_app_module_that_fails_to_import_is_one_line_and_its_traceback_only_under_debug(
    module: str, db_url: str, tmp_path: Path
) -> None:
    source, error = BROKEN_APPS[module]
    (tmp_path / f"{module}.py").write_text(source)
    commands = {
        "fleet-worker": worker_cmd("--app", module),
        "fleetctl up": fleetctl_cmd("up", "--app", module, "--workers", "0"),
    }
    for name, argv in commands.items():
        r = subprocess.run(
            argv, cwd=tmp_path, env=env_for(db_url), capture_output=True, text=True, timeout=60
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (name, r.stderr)
        assert lines[0].startswith(f"{name}: --app: cannot import {module!r}: ") and error in lines[0], lines
        debug = subprocess.run(
            [*argv, "--debug"], cwd=tmp_path, env=env_for(db_url), capture_output=True, text=True, timeout=60
        )
        assert debug.returncode == 2 and "Traceback (most recent call last)" in debug.stderr, debug.stderr
        assert debug.stderr.strip().splitlines()[-1] == lines[0]


def test_a_missing_app_module_is_named(db_url: str, tmp_path: Path) -> None:
    r = subprocess.run(
        worker_cmd("--app", "no_such_app"), cwd=tmp_path, env=env_for(db_url), capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stderr.strip() == (
        "fleet-worker: --app: no module named 'no_such_app' "
        "(looked in the current directory and on PYTHONPATH)"
    )


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ctrl_c_during_apply_exits_130_in_one_line_and_changes_nothing(
    sigint: str, db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Started with SIGINT at its default (a terminal's foreground) or ignored (a shell's `cmd &`):
    fleetctl installs its own handling either way."""
    apply_text(conn, '[[schedule]]\nname = "zz"\nevery = "1h"\njob = "noop"\n')
    f = tmp_path / "s.toml"
    f.write_text(
        '[[schedule]]\nname = "aa"\nevery = "1m"\njob = "noop"\n'
        '[[schedule]]\nname = "zz"\nevery = "2h"\njob = "noop"\n'
    )
    with processes() as procs, connect(db_url, "test blocker") as blocker, blocker.transaction():
        # `apply` creates aa, then waits for zz's row, locked here: Ctrl-C comes in the middle of the write.
        blocker.execute("SELECT 1 FROM fleet.schedules WHERE name = 'zz' FOR UPDATE")
        p = Proc(fleetctl_cmd("apply", str(f)), env_for(db_url), tmp_path / "apply.log", sigint=sigint)
        procs.append(p)
        wait_for(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fleetctl' "
                    "AND datname = current_database() AND wait_event_type = 'Lock'",
                )
                == 1
            ),
            what="apply to wait for the locked row",
        )
        p.signal(signal.SIGINT)
        assert p.wait(timeout=15) == 130, p.output()
        assert p.output().strip().splitlines() == ["fleetctl apply: interrupted; nothing was changed"]
    rows = conn.execute("SELECT name, every FROM fleet.schedules ORDER BY name").fetchall()
    assert [(r["name"], str(r["every"])) for r in rows] == [("zz", "1:00:00")]


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ctrl_c_while_a_command_loads_is_one_line_without_a_traceback(sigint: str, tmp_path: Path) -> None:
    # A server that takes the connection and never answers: `status` waits on it for seconds.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/postgres"
        outcomes = []
        with processes() as procs:
            # From the loading of the command's modules (the database driver's, a tenth of a second)
            # to the command waiting on the database.
            for i, delay in enumerate((0.0, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.6)):
                p = Proc(fleetctl_cmd("status"), env_for(url), tmp_path / f"{i}.log", sigint=sigint)
                procs.append(p)
                wait_for(
                    functools.partial(loading, p, "psycopg_binary"), timeout=10, interval=0.001, what="load"
                )
                time.sleep(delay)  # the instant of the Ctrl-C is what this test varies
                p.signal(signal.SIGINT)
                code, out = p.wait(timeout=15), p.output().strip()
                outcomes.append((delay, code, out))
                assert code == 130 and out in ("fleetctl: interrupted", "fleetctl status: interrupted"), (
                    delay,
                    code,
                    out,
                )
    print("Ctrl-C after loading began (s), line:", [(delay, out) for delay, _, out in outcomes])
    assert outcomes[-1][2] == "fleetctl status: interrupted", outcomes
