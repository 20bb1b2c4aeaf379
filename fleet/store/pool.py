"""Connection pools of the long-running processes: bounded, checked on borrow, and remembering why
their last connection attempt failed. (A command that opens one connection needs only `fleet.store.db`,
and starts without psycopg_pool.)"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from fleet.store.db import connect_failure, connect_kwargs, describe, drop_notify, unprepare_if_refused, where


def _configure(conn: psycopg.Connection[Any]) -> None:
    """A new pooled connection: it drops notifications, and prepares nothing once refused."""
    conn.add_notify_handler(drop_notify)
    unprepare_if_refused(conn)


def _check(conn: psycopg.Connection[Any]) -> None:
    """The pool's check on borrow: the connection still answers, and prepares nothing once refused."""
    unprepare_if_refused(conn)
    ConnectionPool.check_connection(conn)


class Pool(ConnectionPool[Any]):
    """A ConnectionPool that remembers why its last connection attempt failed: the pool retries in
    the background, and a borrower that times out is told only that it waited."""

    last_failure: str | None = None


def _recording(url: str, pool: list[Pool]) -> type[psycopg.Connection[Any]]:
    """A connection class whose failed attempts to connect set `last_failure` of the pool in `pool`."""

    class Recording(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Recording:
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.Error as e:
                for p in pool:
                    p.last_failure = connect_failure(e, url)
                raise
            for p in pool:
                p.last_failure = None
            return conn

    return Recording


class _QuietPoolConnectErrors(logging.Filter):
    """The pool's warning on every failed attempt to connect (psycopg's lines, several per second)
    is dropped: fleet's processes report the failure themselves, once, in one line (`last_failure`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("error connecting in ")


logging.getLogger("psycopg.pool").addFilter(_QuietPoolConnectErrors())


def make_pool(
    url: str, application_name: str, min_size: int = 1, max_size: int = 4, prepare: bool = False
) -> Pool:
    """A bounded pool whose connections are checked on borrow (survives a server restart)."""
    holder: list[Pool] = []
    pool = Pool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={**connect_kwargs(url, application_name, prepare), "row_factory": dict_row},
        connection_class=_recording(url, holder),
        configure=_configure,
        check=_check,
        open=False,
        name=application_name,
        reconnect_timeout=3600,
    )
    holder.append(pool)
    pool.open(wait=False)
    return pool


def unavailable(e: BaseException, pool: ConnectionPool[Any] | None) -> str:
    """One line for a failure to get a connection: the pool's last connection failure (host:port and
    the cause) rather than its timeout, else what `describe` says."""
    if isinstance(e, PoolTimeout) and isinstance(pool, Pool):
        # No failure yet: the first attempt is still waiting for an answer (or every connection is busy).
        return pool.last_failure or f"{where(str(pool.conninfo))}: {str(e).strip()}"
    return describe(e)
