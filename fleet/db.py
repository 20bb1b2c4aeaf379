"""Database access: resolving the URL, connections and pools, all in autocommit mode.

Transactions are always opened visibly by the caller (`with conn.transaction():`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import ConnectionPool

from fleet import logs
from fleet.errors import ConfigError, DatabaseUnavailable

set_json_loads(orjson.loads)
set_json_dumps(orjson.dumps)

# Keepalives find a dead peer of an idle connection in about 25 s, tcp_user_timeout one whose sent
# data goes unacknowledged for 10 s (without it, a statement in flight when the network fails waits
# for the kernel's retransmissions: minutes). The database URL's own values of these win.
_NETWORK_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}

# The claim and finish statements take about as long to plan as to run, so the hot paths prepare
# them (psycopg does so from a statement's second execution). Behind a transaction-pooling proxy
# that does not track them (PgBouncer before 1.22, or without max_prepared_statements) prepared
# statements break: FLEET_PREPARED_STATEMENTS=0 turns them off.
PREPARE_AFTER = 1

# Set once a statement failed the way prepared statements fail behind such a proxy (one session's
# statements reaching another server connection): from then on this process prepares nothing.
_prepare_refused = threading.Event()
_refusing = threading.Lock()
_PREPARE_STATES = ("42P05", "26000")  # duplicate_prepared_statement, invalid_sql_statement_name


def prepared_statements_broke(e: BaseException, **who: str) -> bool:
    """If `e` is a prepared statement that another server connection did not know or already had
    (a transaction-pooling proxy), turn preparing off for this process's connections, old and new,
    and say so, once (with `who`: the process's id field). True for every such error: the caller
    need not log it, and its next try, on a connection borrowed or opened again, prepares nothing."""
    if not isinstance(e, psycopg.Error):
        return False
    state = e.sqlstate or ""
    if state not in _PREPARE_STATES and not (state == "08P01" and "prepared statement" in str(e)):
        return False
    with _refusing:
        first = not _prepare_refused.is_set()
        _prepare_refused.set()
    if first:
        logs.event(
            "prepared_statements_off",
            **who,
            error=str(e).strip()[:300],
            hint="a transaction-pooling proxy that does not track prepared statements is in the way: set "
            "FLEET_PREPARED_STATEMENTS=0 so that nothing is prepared before this is noticed",
        )
    return True


def _drop_notify(_: psycopg.Notify) -> None:
    """The notification handler of every connection that does not LISTEN. Such a connection gets
    notifications only behind a transaction-pooling proxy (the server connection it is handed had
    another client's LISTEN); without a handler psycopg would keep each one, without bound."""


def _configure(conn: psycopg.Connection[Any]) -> None:
    """A new pooled connection: it drops notifications, and prepares nothing once refused."""
    conn.add_notify_handler(_drop_notify)
    _unprepare(conn)


def _unprepare(conn: psycopg.Connection[Any]) -> None:
    if _prepare_refused.is_set():
        conn.prepare_threshold = None


def _check(conn: psycopg.Connection[Any]) -> None:
    """The pool's check on borrow: the connection still answers, and prepares nothing once refused."""
    _unprepare(conn)
    ConnectionPool.check_connection(conn)


def resolve_url(url: str | None, base_dir: Path | None = None) -> str:
    """The given URL, or the embedded server's (started if needed) when none is given."""
    if url:
        return url
    from fleet.embedded import embedded_url

    return embedded_url(base_dir)


def redact(url: str) -> str:
    """The URL with any password replaced, safe to log."""
    url = re.sub(r"(://[^:/@?]*:)[^@/?]+@", r"\1***@", url)
    return re.sub(r"(password=)[^&\s]*", r"\1***", url)


def url_params(url: str, flag: str = "database URL") -> dict[str, Any]:
    """The connection parameters the URL sets; ConfigError naming `flag` if libpq cannot read it."""
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise ConfigError(f"{flag}: {redact(str(e).strip())}") from None


def _kwargs(url: str, application_name: str, prepare: bool = False) -> dict[str, Any]:
    given = url_params(url)
    return {
        **{k: v for k, v in _NETWORK_DEFAULTS.items() if k not in given},
        "autocommit": True,
        "application_name": application_name[:63],
        "prepare_threshold": PREPARE_AFTER if prepare and not _prepare_refused.is_set() else None,
    }


def connect(
    url: str, application_name: str, prepare: bool = False, listen: bool = False
) -> psycopg.Connection[dict[str, Any]]:
    """A new autocommit connection returning rows as dicts. Unless it is to `listen` (and read
    its notifications with `notifies()`), notifications that reach it are dropped."""
    kwargs = _kwargs(url, application_name, prepare)
    try:
        conn = psycopg.connect(url, row_factory=dict_row, **kwargs)
    except psycopg.OperationalError as e:
        raise DatabaseUnavailable(f"cannot connect to {redact(url)}: {str(e).strip()}") from e
    if not listen:
        conn.add_notify_handler(_drop_notify)
    return conn


def connect_retrying(
    url: str,
    application_name: str,
    deadline_s: float,
    on_retry: Callable[[Exception], None] | None = None,
    prepare: bool = False,
    stop: threading.Event | None = None,
) -> psycopg.Connection[dict[str, Any]]:
    """Connect, retrying with backoff for up to `deadline_s` (start-up under a process manager).
    Raises the last DatabaseUnavailable when the deadline passes or `stop` is set."""
    end = time.monotonic() + deadline_s
    delay = 0.2
    stop = stop or threading.Event()
    while True:
        try:
            return connect(url, application_name, prepare)
        except DatabaseUnavailable as e:
            if time.monotonic() + delay > end or stop.is_set():
                raise
            if on_retry:
                on_retry(e)
            if stop.wait(delay):
                raise
            delay = min(delay * 2, 5.0)


def make_pool(
    url: str, application_name: str, min_size: int = 1, max_size: int = 4, prepare: bool = False
) -> ConnectionPool[Any]:
    """A bounded pool whose connections are checked on borrow (survives a server restart)."""
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={**_kwargs(url, application_name, prepare), "row_factory": dict_row},
        configure=_configure,
        check=_check,
        open=False,
        name=application_name,
        reconnect_timeout=3600,
    )
    pool.open(wait=False)
    return pool
