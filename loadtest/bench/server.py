"""The PostgreSQL server under test: scratch databases (created fresh, dropped at the end), and what
the benchmark reads about them (transaction counters, listening sessions), and this machine's busy
CPU time."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fleet.store.db import connect
from fleet.store.embedded import embedded_url
from fleet.store.migrate import migrate
from loadtest.bench.procs import ROOT, Proc, Processes

T = TypeVar("T")
APP = "fleet-bench"
_TICKS = os.sysconf("SC_CLK_TCK")


class Server:
    """A server reached through `url` (a maintenance database on it)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"fleet_bench_{os.getpid()}"
        self.created: list[str] = []

    def admin(self) -> psycopg.Connection[dict[str, Any]]:
        return connect(self.url, f"{APP} admin")

    def version(self) -> str:
        with self.admin() as c:
            row = c.execute("SHOW server_version").fetchone()
        return str(row["server_version"]) if row else "?"

    def database(self, suffix: str, *, fleet_schema: bool = True) -> str:
        """A new empty database (with fleet's schema unless told otherwise); returns its URL."""
        name = f"{self.prefix}_{suffix}"
        with self.admin() as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        url = make_conninfo(self.url, dbname=name)
        if fleet_schema:
            with connect(url, APP) as conn:
                migrate(conn)
        return url

    def drop_all(self) -> None:
        for name in reversed(self.created):
            with contextlib.suppress(psycopg.Error), self.admin() as c:
                c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        self.created.clear()

    def transactions(self, url: str) -> int:
        """Committed plus rolled-back transactions of the database of `url`, as the server has counted
        them so far (read from the maintenance database, so the reading itself is not counted)."""
        with self.admin() as c:
            row = c.execute(
                "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = %s",
                (dbname(url),),
            ).fetchone()
        return int(row["n"]) if row else 0

    def sessions(self, url: str) -> int:
        """Client sessions connected to that database, idle (waiting for work), other than the benchmark's."""
        with self.admin() as c:
            row = c.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = %s AND state = 'idle' "
                "AND backend_type = 'client backend' AND application_name NOT LIKE 'fleet-bench%%'",
                (dbname(url),),
            ).fetchone()
        return int(row["n"]) if row else 0

    def listeners(self, url: str) -> int:
        """Sessions of that database waiting in LISTEN (a worker that is ready for wake-ups)."""
        with self.admin() as c:
            row = c.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = %s AND state = 'idle' "
                "AND query ILIKE 'LISTEN%%'",
                (dbname(url),),
            ).fetchone()
        return int(row["n"]) if row else 0


def dbname(url: str) -> str:
    return str(conninfo_to_dict(url).get("dbname", ""))


def pg_env(url: str) -> dict[str, str]:
    """libpq environment variables naming the database of `url`, for clients that read them."""
    d = conninfo_to_dict(url)
    names = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "password": "PGPASSWORD",
        "dbname": "PGDATABASE",
    }
    return {env: str(d[k]) for k, env in names.items() if d.get(k) not in (None, "")}


def checkpoint(conn: psycopg.Connection[Any]) -> None:
    """Write dirty pages now, so a checkpoint is less likely to land inside a measurement (needs
    superuser or pg_checkpoint; skipped without)."""
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        conn.execute("CHECKPOINT")


def wait_until(
    fn: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.1,
    procs: Processes | None = None,
    watched: Sequence[Proc] = (),
) -> T:
    """Poll `fn` until it returns something truthy, failing after `timeout` s or when a watched
    process exits."""
    end = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if procs is not None:
            procs.check(watched)
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def busy_cpu_s() -> float:
    """CPU time this whole machine has spent busy so far, all cores: user, system and interrupt
    time from /proc/stat, idle, I/O wait and time stolen by the host left out."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / _TICKS


def serves_locally(url: str) -> bool:
    """Whether the server's processes run on this machine (its backend is visible in /proc), so
    that this machine's CPU time includes the server's."""
    with connect(url, "fleet-bench") as conn:
        return Path(f"/proc/{conn.info.backend_pid}/schedstat").exists()


def cpu_tool_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of a tool that reads the server's CPU time (`rounds`, `gate_cost`), with its
    --database-url."""
    p = argparse.ArgumentParser(
        prog=f"python -m loadtest.bench.{prog}", description=(doc or "").split("\n\n")[0]
    )
    p.add_argument(
        "--database-url", help="a server on this machine (default: FLEET_DATABASE_URL, else embedded)"
    )
    return p


@contextlib.contextmanager
def local_database(database_url: str | None, name: str, tool: str) -> Iterator[str | None]:
    """A scratch database `name` on the server of `database_url` (else FLEET_DATABASE_URL, else the
    embedded one), dropped at the end; None, with a line saying why, when the server's processes
    are not on this machine, whose /proc the tool reads."""
    server = Server(database_url or os.environ.get("FLEET_DATABASE_URL") or embedded_url(ROOT))
    try:
        url = server.database(name)
        if serves_locally(url):
            yield url
        else:
            print(f"{tool}: the server's processes are not visible here (/proc): run it on this machine")
            yield None
    finally:
        server.drop_all()


def settle_stats() -> None:
    """Sessions report their counters when they end; give ended sessions a moment to do so."""
    time.sleep(0.5)
