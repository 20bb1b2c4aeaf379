"""fleet behind PgBouncer in transaction mode, as the README promises: no LISTEN wake-ups and no
session state reach the workers, so polling carries on, and every slot still runs once with its
lease kept by heartbeats that may each land on another server connection. Prepared statements are
off (`--no-prepared-statements`, as PgBouncer 1.18 needs), or, left on, turned off by each process
at their first failure."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fleet.store.db import connect
from fleet.store.pool import make_pool
from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    free_port,
    job_events,
    log_events,
    processes,
    scalar,
    start_worker,
    ticker_cmd,
    wait_for,
)

PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
pytestmark = pytest.mark.skipif(
    PGBOUNCER is None, reason="pgbouncer (Debian package pgbouncer) not installed"
)


@pytest.fixture
def bouncer_url(request: pytest.FixtureRequest, db_url: str) -> Iterator[str]:
    """`db_url` through a PgBouncer in transaction mode on a loopback port, with 2 server
    connections (or as many as the test's parameter says) for all its clients, so consecutive
    transactions of one client change backends."""
    pool_size = getattr(request, "param", 2)
    given = conninfo_to_dict(db_url)
    host = str(given.get("host") or "/var/run/postgresql")
    user = str(given.get("user") or pwd.getpwuid(os.getuid()).pw_name)
    workdir = Path(tempfile.mkdtemp(prefix="flpgb", dir="/tmp"))
    workdir.chmod(0o755)  # read by the user PgBouncer switches to when the tests run as root
    port = free_port()
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    run_as = ""
    if os.getuid() == 0:  # PgBouncer refuses to run as root; a socket directory admits its owner
        owner = os.stat(host).st_uid if host.startswith("/") else pwd.getpwnam("nobody").pw_uid
        run_as = f"user = {pwd.getpwuid(owner).pw_name}\n"
    (workdir / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={host} port={given.get('port') or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 50\n" + run_as
    )
    with processes() as procs:
        pgb = Proc(
            [str(PGBOUNCER), str(workdir / "pgbouncer.ini")], dict(os.environ), workdir / "pgbouncer.log"
        )
        procs.append(pgb)
        url = make_conninfo(db_url, host="127.0.0.1", port=str(port))
        try:
            wait_for(lambda: _answers(url), timeout=10, what=f"pgbouncer on port {port}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{pgb.output()}") from None
        yield url
    shutil.rmtree(workdir, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2, prepare_threshold=None) as c:
            c.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def run_behind(
    url: str, conn: psycopg.Connection[Any], tmp: Path, *flags: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A ticker and two workers through `url`: a slot every second, and a 3 s job every 5 s whose
    lease (2 s) lives only through heartbeats. Returns the runs and every process's log events."""
    start = (scalar(conn, "SELECT now()") + timedelta(seconds=2)).replace(microsecond=0)
    apply_text(
        conn,
        f'[[schedule]]\nname = "tick"\nevery = "1s"\njob = "noop"\nstart_at = "{start.isoformat()}"\n'
        f'[[schedule]]\nname = "slow"\nevery = "5s"\njob = "sleep"\nargs = {{ seconds = 3 }}\n'
        f'start_at = "{start.isoformat()}"\n',
    )
    with processes() as procs:
        # Slots only when due: once the schedules are disabled, every run created ends soon.
        ticker = Proc(
            ticker_cmd("--id", "t", "--poll", "0.5", "--lookahead", "0", *flags), env_for(url), tmp / "t.log"
        )
        procs.append(ticker)
        workers = [start_worker(procs, url, tmp, f"w{i}", *FAST, *flags) for i in range(2)]
        wait_for(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(*) FROM fleet.job_runs WHERE schedule_name = 'slow' AND status = 'done'",
                )
                >= 2
            ),
            timeout=30,
            what="two slow runs done",
        )
        conn.execute("UPDATE fleet.schedules SET enabled = false")
        wait_for(
            lambda: (
                scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status IN ('pending', 'running')")
                == 0
            ),
            timeout=20,
            what="every created run to end",
        )
        events = [e for p in (ticker, *workers) for e in log_events(p)]
    runs = conn.execute(
        "SELECT schedule_name, scheduled_for, status::text, attempts, failures FROM fleet.job_runs ORDER BY 1, 2"
    ).fetchall()
    ticks = [r["scheduled_for"] for r in runs if r["schedule_name"] == "tick"]
    assert len(ticks) >= 8, runs
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))], "a slot is missing"
    assert {r["status"] for r in runs} == {"done"}, runs
    done = Counter(e[1] for e in job_events(tmp) if e[0] == "done")
    assert len(done) == len(runs) and set(done.values()) == {1}, done
    return runs, events


def test_behind_transaction_pooling_every_slot_runs_once_on_its_first_attempt(
    bouncer_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    runs, events = run_behind(bouncer_url, conn, tmp_path, "--no-prepared-statements")
    assert all((r["attempts"], r["failures"]) == (1, 0) for r in runs), runs
    names = Counter(e["event"] for e in events)
    for bad in ("heartbeat_lost", "fenced", "db_error", "heartbeat_error", "prepared_statements_off"):
        assert names[bad] == 0, (bad, [e for e in events if e["event"] == bad][:3])


def test_behind_transaction_pooling_prepared_statements_are_turned_off_when_they_fail(
    bouncer_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Left on, prepared statements reach server connections that do not have them, or have another
    # session's under the same name. Each process says so once, stops preparing, and goes on.
    _, events = run_behind(bouncer_url, conn, tmp_path)
    off = [e for e in events if e["event"] == "prepared_statements_off"]
    assert off and len(off) == len({e.get("worker_id") or e.get("ticker_id") for e in off}) <= 3, off
    assert all("prepared statement" in e["error"] and "FLEET_PREPARED_STATEMENTS=0" in e["hint"] for e in off)
    for e in off:
        who = e.get("worker_id") or e.get("ticker_id")
        after = [x for x in events if (x.get("worker_id") or x.get("ticker_id")) == who and x["ts"] > e["ts"]]
        errors = [x for x in after if x["event"] in ("db_error", "heartbeat_error")]
        assert not errors, errors


@pytest.mark.parametrize("bouncer_url", [1], indirect=True)
def test_notifications_reaching_a_connection_that_does_not_listen_are_dropped(
    bouncer_url: str, conn: psycopg.Connection[Any]
) -> None:
    # One server connection for every client: the LISTEN of a worker's listener stays on it, and
    # the proxy hands the notifications meant for the listener to whichever client has the server
    # connection when they arrive. psycopg keeps those a connection does not read, without bound.
    listener = connect(bouncer_url, "listener", listen=True)
    listener.execute("LISTEN fleet_runs")
    plain = psycopg.connect(bouncer_url, autocommit=True, prepare_threshold=None)
    reached_plain: list[psycopg.Notify] = []
    plain.add_notify_handler(reached_plain.append)
    fleet_conn = connect(bouncer_url, "fleet connection")
    pool = make_pool(bouncer_url, "fleet pool", min_size=1, max_size=1)
    try:
        # A notification sent while a client's statement runs on the listener's server connection
        # comes to that client with the statement's result.
        with pool.connection(timeout=10) as pooled:
            for client in (plain, fleet_conn, pooled):
                for _ in range(3):
                    running = threading.Thread(target=client.execute, args=("SELECT pg_sleep(0.3)",))
                    running.start()
                    time.sleep(0.1)
                    conn.execute("NOTIFY fleet_runs")
                    running.join(10)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # notifies() beside a handler
            kept = list(fleet_conn.notifies(timeout=0))
            with pool.connection(timeout=10) as pooled:
                kept += list(pooled.notifies(timeout=0))
    finally:
        pool.close()
        for c in (listener, plain, fleet_conn):
            c.close()
    assert reached_plain, "no notification reached a connection that does not listen"
    assert kept == [], f"{len(kept)} notifications kept by fleet's connections"
