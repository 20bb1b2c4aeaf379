"""The load test's PostgreSQL: the embedded server in its work directory (or the server of a given URL),
a fresh database with fleet's schema and the load test's tables, and restarting the server as a fault."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fleet.errors import DatabaseUnavailable
from fleet.store.db import connect, redact
from fleet.store.embedded import EMBEDDED_DIR, as_user, embedded_url, stop_embedded
from fleet.store.migrate import migrate
from loadtest.queries import SCHEMA, q

RESTART_TIMEOUT_S = 60.0
T = TypeVar("T")


@dataclass
class Server:
    """A PostgreSQL server: the embedded one of `base_dir` (started by us), or one given by URL."""

    url: str
    base_dir: Path | None = None  # set for the embedded server
    restart_cmd: str | None = None

    @property
    def embedded(self) -> bool:
        return self.base_dir is not None

    @property
    def pgdata(self) -> Path | None:
        return (self.base_dir / EMBEDDED_DIR).resolve() if self.base_dir else None

    @property
    def can_restart(self) -> bool:
        return self.embedded or bool(self.restart_cmd)

    @classmethod
    def start_embedded(cls, base_dir: Path, restart_cmd: str | None = None) -> Server:
        """Start the embedded server in `<base_dir>/.fleet/pgdata` (it must not be running yet)."""
        return cls(embedded_url(base_dir), base_dir, restart_cmd)

    def stop(self) -> None:
        if self.base_dir is not None:
            stop_embedded(self.base_dir)

    def restart(self) -> None:
        """Restart the server (`pg_ctl restart -m fast` as the owner of pgdata, or --pg-restart-cmd),
        returning once it accepts connections again; raises RuntimeError when it does not."""
        if self.restart_cmd:
            cmd = ["/bin/sh", "-c", self.restart_cmd]
        elif self.pgdata is not None:
            cmd = _pg_ctl_as_owner(
                self.pgdata, ["-m", "fast", "-w", "-t", "60", "-l", str(self.pgdata / "log"), "restart"]
            )
        else:
            raise RuntimeError("restarting a server given by URL needs --pg-restart-cmd")
        # stdout to a file: a server started by pg_ctl keeps the descriptors it inherited.
        log = (self.base_dir or Path("/tmp")) / "pg_restart.log"
        with open(log, "ab") as out:
            done = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=RESTART_TIMEOUT_S,
                check=False,
            )
        if done.returncode != 0:
            raise RuntimeError(f"restarting PostgreSQL failed (exit {done.returncode}); see {log}")
        end = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            try:
                with connect(self.url, "loadtest restart probe") as conn:
                    conn.execute("SELECT 1")
                return
            except Exception:  # noqa: BLE001 - the server is restarting: any error means not yet
                if time.monotonic() > end:
                    raise RuntimeError("PostgreSQL did not come back after the restart") from None
                time.sleep(0.1)


def _pg_ctl_as_owner(pgdata: Path, args: list[str]) -> list[str]:
    import pgserver

    pg_ctl = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    return as_user(pgdata.owner(), [str(pg_ctl), "-D", str(pgdata), *args])


def shown(url: str) -> str:
    """The URL as printed: without its password, if it has one."""
    return redact(url) if conninfo_to_dict(url).get("password") else url


def database_name(url: str) -> str:
    return str(conninfo_to_dict(url).get("dbname") or "")


def create_database(server_url: str, name: str) -> str:
    """Create the empty database `name` on the server of `server_url`; returns its URL."""
    with connect(server_url, "loadtest admin") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(server_url, dbname=name)


def prepare(url: str) -> None:
    """Fleet's schema and the load test's tables in an empty database; refuses one that has them."""
    with connect(url, "loadtest prepare") as conn:
        found = conn.execute("SELECT to_regclass('loadtest_meta') IS NOT NULL AS found").fetchone()
        if found and found["found"]:
            raise RuntimeError(f"{redact(url)} already holds a load test; use a fresh database")
        migrate(conn)
        with conn.transaction():
            conn.execute(SCHEMA.encode())


def db_clock(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute(q("db_clock")).fetchone()
    assert row is not None
    at: datetime = row["at"]
    return at


def retrying(url: str, fn: Callable[[psycopg.Connection[Any]], T], timeout_s: float = 60.0) -> T:
    """fn(conn) on a fresh connection, tried again while the server is unavailable (a restart, starved
    connections) for up to `timeout_s`."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            with connect(url, "loadtest") as conn:
                return fn(conn)
        except (psycopg.OperationalError, DatabaseUnavailable):
            if time.monotonic() > end:
                raise
            time.sleep(0.25)
