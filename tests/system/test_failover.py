"""Failover: the primary crashes (`pg_ctl stop -m immediate`) and its streaming replica is promoted.
A ticker and a worker given both hosts (`host=a,b port=p,q target_session_attrs=read-write`) find the
new primary by themselves, without a restart: slots go on being created and run, and what the crash
left running is taken over when its lease runs out.

Two throwaway clusters on loopback ports, made with the embedded PostgreSQL's binaries (as the
`pgserver` system user when the tests run as root, as that package does); both are stopped by the
test, by their data directories.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from fleet.store.db import connect
from fleet.store.embedded import as_user
from fleet.store.migrate import migrate
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


def _bindir() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError:
            pytest.skip("the embedded PostgreSQL (pgserver) is not installed")
    return Path(pgserver.__file__).parent / "pginstall" / "bin"


class Cluster:
    """One PostgreSQL data directory and its server on a loopback port."""

    def __init__(self, bindir: Path, user: str | None, pgdata: Path, port: int) -> None:
        self.bindir, self.user, self.pgdata, self.port = bindir, user, pgdata, port

    def run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.user:
            cmd = as_user(self.user, cmd)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{tool} {args}: {done.stdout}{done.stderr}"

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.pgdata} "
            "-c fsync=off -c max_connections=40"
        )
        self.run("pg_ctl", "-D", str(self.pgdata), "-o", opts, "-l", f"{self.pgdata}.log", "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self.run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "stop")

    def url(self, dbname: str) -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname)


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Cluster]]:
    """A primary with a database `fleet`, migrated, and its streaming replica, both running."""
    bindir = _bindir()
    user = None
    if os.geteuid() == 0:
        user = "pgserver"
        try:
            pwd.getpwnam(user)
        except KeyError:
            if not shutil.which("useradd"):
                pytest.skip("running as root without useradd: no user to run PostgreSQL as")
            subprocess.run(["useradd", "-s", "/bin/sh", user], check=True, capture_output=True)
    base = Path(tempfile.mkdtemp(prefix="flfo", dir="/tmp"))
    base.chmod(0o755)
    if user:
        shutil.chown(base, user)
    primary = Cluster(bindir, user, base / "primary", free_port())
    replica = Cluster(bindir, user, base / "replica", free_port())
    try:
        primary.run("initdb", "-D", str(primary.pgdata), "-U", "postgres", "-A", "trust", "--no-sync")
        primary.start()
        with connect(primary.url("postgres"), "fleet-tests admin") as admin:
            admin.execute("CREATE DATABASE fleet")
        with connect(primary.url("fleet"), "fleet-tests migrate") as conn:
            migrate(conn)
        primary.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(replica.pgdata), "-R", "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        replica.start()
        yield primary, replica
    finally:
        for c in (primary, replica):
            with contextlib.suppress(AssertionError):
                c.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def test_ticker_and_worker_follow_a_promoted_replica(pair: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    primary, replica = pair
    both = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{replica.port} user=postgres dbname=fleet "
        "target_session_attrs=read-write"
    )
    with connect(primary.url("fleet"), "fleet-tests") as conn:
        apply_text(
            conn,
            '[[schedule]]\nname = "s"\nevery = "1s"\njob = "sleep"\nargs = { seconds = 0.3 }\n'
            'catchup = "all"\nmax_lateness = "1h"\n',
        )
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"),
            what="the replica to stream",
        )
    with processes() as procs:
        ticker = Proc(ticker_cmd("--poll", "0.5"), env_for(both), tmp_path / "ticker.log")
        procs.append(ticker)
        worker = start_worker(procs, both, tmp_path, "w", *FAST)
        with connect(primary.url("fleet"), "fleet-tests") as conn:
            wait_for(
                lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") >= 3,
                what="runs done on the primary",
            )
        primary.stop("immediate")  # a crash: no shutdown checkpoint, connections cut
        crashed = time.monotonic()
        replica.run("pg_ctl", "-D", str(replica.pgdata), "-w", "promote")
        promoted = time.monotonic()
        with connect(replica.url("fleet"), "fleet-tests") as conn:
            promoted_at = scalar(conn, "SELECT now()")
            wait_for(
                lambda: scalar(
                    conn,
                    "SELECT count(*) FROM fleet.job_runs WHERE status = 'done' AND finished_at > %s",
                    (promoted_at,),
                ),
                timeout=30,
                what="a run done on the new primary",
            )
            print(
                f"promoted {promoted - crashed:.2f} s after the crash; "
                f"first run done on the new primary {time.monotonic() - promoted:.2f} s after the promotion"
            )
            wait_for(
                lambda: (
                    scalar(
                        conn,
                        "SELECT count(*) FROM fleet.job_runs WHERE status = 'done' AND scheduled_for > %s",
                        (promoted_at,),
                    )
                    >= 3
                ),
                timeout=30,
                what="slots after the promotion created and run on the new primary",
            )
            # Nothing is left behind: every slot up to a second ago is done (a run the crash left
            # running is retaken when its lease runs out; a slot the replica had not seen is created
            # again by the ticker, catch-up 'all').
            wait_for(
                lambda: (
                    not scalar(
                        conn,
                        "SELECT count(*) FROM fleet.job_runs "
                        "WHERE status <> 'done' AND scheduled_for < now() - interval '4 s'",
                    )
                ),
                timeout=15,
                what="every slot before the last few seconds done",
            )
            rows = conn.execute(
                "SELECT scheduled_for, scheduled_for <= now() AS due FROM fleet.job_runs ORDER BY 1"
            ).fetchall()
            slots = [r["scheduled_for"] for r in rows]
            due = [r["scheduled_for"] for r in rows if r["due"]]  # the others were created ahead
        assert ticker.popen.poll() is None and worker.popen.poll() is None, "a process exited"
        ticker_events = [e["event"] for e in log_events(ticker)]
        worker_events = [e["event"] for e in log_events(worker)]
    # Every second from the first slot on has its run: none lost to the crash.
    gaps = [(a, b) for a, b in zip(slots, slots[1:], strict=False) if (b - a).total_seconds() != 1]
    assert not gaps, gaps
    assert "db_error" in ticker_events or "db_unavailable" in ticker_events, ticker_events
    assert "db_error" in worker_events or "db_unavailable" in worker_events, worker_events
    started = [e for e in job_events(tmp_path) if e[0] == "start"]
    assert len(started) >= len(due) - 1, (len(started), len(due))
