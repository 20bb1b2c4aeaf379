"""Database access: resolving the URL and connections, all in autocommit mode (pools: `fleet.store.pool`).

Transactions are always opened visibly by the caller (`with conn.transaction():`).
"""

from __future__ import annotations

import getpass
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import set_json_dumps, set_json_loads

from fleet.errors import ConfigError, DatabaseUnavailable, PermissionDenied
from fleet.observe import logs

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


def drop_notify(_: psycopg.Notify) -> None:
    """The notification handler of every connection that does not LISTEN. Such a connection gets
    notifications only behind a transaction-pooling proxy (the server connection it is handed had
    another client's LISTEN); without a handler psycopg would keep each one, without bound."""


def unprepare_if_refused(conn: psycopg.Connection[Any]) -> None:
    """Turn preparing off on `conn` once a proxy refused prepared statements in this process."""
    if _prepare_refused.is_set():
        conn.prepare_threshold = None


def resolve_url(url: str | None, base_dir: Path | None = None) -> str:
    """The given URL; without one, the embedded server's while a `fleetctl up` runs it in `base_dir`
    (the current directory). Otherwise ConfigError: nothing else starts a server."""
    if url:
        return url
    from fleet.store.embedded import running_up

    up = running_up(base_dir)
    if up is not None and up.url:
        return up.url
    if up is not None:
        raise ConfigError(
            f"FLEET_DATABASE_URL: the fleetctl up running here (pid {up.pid}) is starting or uses a "
            "database given to it; set FLEET_DATABASE_URL"
        )
    raise ConfigError(
        "FLEET_DATABASE_URL: not set, and no fleetctl up runs in this directory; "
        "set FLEET_DATABASE_URL (or run fleetctl up)"
    )


_SECRET_PARAMS = ("password", "sslpassword")


def redact(url: str) -> str:
    """The connection string with its password left out, safe to print, log or trace.

    libpq's own parser reads it (a URL or `key = value` words, any quoting or escaping libpq
    accepts), and the result is rebuilt as a URL from what it found, less the secrets. A string
    libpq cannot read is not shown at all: where its password is cannot be known.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an unreadable connection string)"
    for key in _SECRET_PARAMS:
        params.pop(key, None)
    return _as_url(params)


def scrub(text: str) -> str:
    """Free text (an error message) with anything shaped like a URL's password or a password=
    setting replaced: for text that is not itself a connection string."""
    text = re.sub(r"(://[^:/@?\s]*:)[^@/?\s]+@", r"\1***@", text)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", text)


def _as_url(params: dict[str, Any]) -> str:
    quote = urllib.parse.quote
    user = params.pop("user", None)
    hosts = str(params.pop("host", "") or "")
    ports = str(params.pop("port", "") or "")
    dbname = params.pop("dbname", None)
    netloc = ""
    if hosts and not hosts.startswith("/") and "," not in hosts:
        netloc = quote(hosts, safe=":[]") + (f":{quote(ports, safe='')}" if ports else "")
    else:  # a socket directory or several hosts: as query parameters, as libpq reads them
        if hosts:
            params["host"] = hosts
        if ports:
            params["port"] = ports
    if user:
        netloc = f"{quote(str(user), safe='')}@{netloc}"
    path = f"/{quote(str(dbname), safe='')}" if dbname else ""
    query = urllib.parse.urlencode(sorted((k, str(v)) for k, v in params.items()))
    return f"postgresql://{netloc}{path}" + (f"?{query}" if query else "")


def permission_denied(e: BaseException, url: str, needs: str) -> PermissionDenied | None:
    """A PermissionDenied naming the role of `url`, what was refused and the fleet role `needs`, when
    `e` is the database refusing a privilege (or a row-level rule); None for any other error."""
    if not isinstance(e, psycopg.errors.InsufficientPrivilege):
        return None
    try:
        role = conninfo_to_dict(url).get("user") or getpass.getuser()
    except (psycopg.ProgrammingError, KeyError, OSError):
        role = "?"
    what = (str(e).strip().splitlines() or ["permission denied"])[0]
    return PermissionDenied(f"role {role}: {what}; grant it {needs} (`fleetctl migrate --roles` creates it)")


URL_FORMS = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or 'host=HOST port=PORT dbname=DATABASE'"


_EXPECTED = ('"="', '"]"')


def _redacted(why: str) -> str:
    """A libpq message with what it quotes of the connection string left out (`…`)."""
    for i, literal in enumerate(_EXPECTED):
        why = why.replace(literal, f"\x00{i}")
    first, last = why.find('"'), why.rfind('"')
    if first >= 0:
        why = why[:first] + "…" + (why[last + 1 :] if last > first else "")
    for i, literal in enumerate(_EXPECTED):
        why = why.replace(f"\x00{i}", literal)
    return why


def url_params(url: str, flag: str = "database URL") -> dict[str, Any]:
    """The connection parameters the URL sets; ConfigError naming `flag` if it is not a PostgreSQL
    URL libpq can read, if libpq would read it otherwise than written (a `/` or `@` of a password
    not percent-encoded), or if a setting has a value libpq refuses when it connects (a port, an
    `sslmode`, a timeout). The password is never in the message."""
    scheme = re.match(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://", url)
    if scheme and scheme.group(1).lower() not in ("postgresql", "postgres"):
        raise ConfigError(f"{flag}: {scheme.group(1)}:// is not a PostgreSQL URL; give {URL_FORMS}")
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        why = (str(e).strip() or "unreadable").splitlines()[0]
        if not why.startswith(("invalid URI query parameter", "invalid connection option")):
            # libpq quotes the part it could not read, which may hold the password (and quotes of
            # its own): everything from the first quote to the last is left out, but for the
            # character libpq expected ("=", "]"). (The two kinds above quote the name of an
            # option, never a value.)
            why = _redacted(why)
        raise ConfigError(f"{flag}: not a PostgreSQL connection string ({why}); give {URL_FORMS}") from None
    problem = (_misread(url) if scheme else None) or _bad_value(params, url_form=bool(scheme))
    if problem:
        raise ConfigError(f"{flag}: {problem}")
    return params


def _misread(url: str) -> str | None:
    """Why libpq would read a URL otherwise than it was meant, where that would also put part of
    its password where it is printed: a `/` or an `@` of the password written as it is."""
    rest = url.split("://", 1)[1]
    authority, slash, path = rest.partition("/")
    if slash and "@" in path.partition("?")[0]:
        return "an @ after the host's /: write a / of the user name or password as %2F"
    if authority.count("@") > 1:
        return "more than one @ before the host: write an @ of the user name or password as %40"
    return None


# Settings libpq checks only when it connects, checked at start instead (their values are not
# shown: a URL misread by a user would put part of a password there).
_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
}
_INTEGERS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)


def _bad_value(params: dict[str, Any], url_form: bool) -> str | None:
    """The first setting whose value libpq would refuse when it connects, as a problem line."""
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            # (a URL's password holding a / ends its host there, and the rest reads as the port)
            hint = " (write a / of a password as %2F)" if url_form else ""
            return f"port: must be a number from 1 to 65535{hint}"
    for key, choices in _CHOICES.items():
        if key in params and params[key] not in choices:
            return f"{key}: must be one of {', '.join(choices)}"
    for key in _INTEGERS:
        value = str(params.get(key, "0")).strip()
        if not re.fullmatch(r"-?[0-9]{1,9}", value):
            return f"{key}: must be a whole number"
    return None


def where(url: str) -> str:
    """host:port that `url` connects to, for messages (never its password)."""
    try:
        p = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the database"
    host = p.get("host") or p.get("hostaddr") or "the local socket"
    return f"{host}:{p.get('port') or 5432}"


_SERVER_FAILED = re.compile(r'connection to server (?:at "[^"]*", port \d+|on socket "[^"]*") failed: ')


def connect_failure(e: BaseException, url: str) -> str:
    """One line for a failed connection attempt: where to, and the cause (connection refused, an
    unknown host, authentication), without libpq's hints on further lines."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip() and not ln[:1].isspace()]
    cause = lines[0] if lines else type(e).__name__
    cause = re.sub(r"^connection (?:failed|is bad): ", "", cause)
    cause = _SERVER_FAILED.sub("", cause)
    cause = re.sub(r"^(?:FATAL|ERROR):\s+", "", cause)
    if len(cause) > 1 and cause[0].isupper() and cause[1].islower():
        cause = cause[0].lower() + cause[1:]
    return f"cannot connect to {where(url)}: {scrub(cause)}"


# A relation or schema of fleet's that is missing: the database is not migrated (or is too old).
_UNMIGRATED = ("42P01", "3F000")  # undefined_table, invalid_schema_name
SCHEMA_MISSING = "the database has no fleet schema, or an older one; run `fleetctl migrate`"


def describe(e: BaseException) -> str:
    """One line about a database error, for logs and messages: what to do when the schema is
    missing, else the error's first line (without the statement excerpt and hints that follow)."""
    if isinstance(e, DatabaseUnavailable):
        return str(e)
    text = str(e).strip()
    first = text.splitlines()[0].strip() if text else type(e).__name__
    if isinstance(e, psycopg.Error) and e.sqlstate in _UNMIGRATED and "fleet" in first:
        return f"{first}: {SCHEMA_MISSING}"
    return first[:300]


def connect_kwargs(url: str, application_name: str, prepare: bool = False) -> dict[str, Any]:
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
    kwargs = connect_kwargs(url, application_name, prepare)
    try:
        conn = psycopg.connect(url, row_factory=dict_row, **kwargs)
    except psycopg.OperationalError as e:
        raise DatabaseUnavailable(connect_failure(e, url)) from e
    if not listen:
        conn.add_notify_handler(drop_notify)
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
