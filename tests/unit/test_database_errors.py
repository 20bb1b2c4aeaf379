"""Which database a command uses and how its errors read: the running `fleetctl up` of a directory is
found by its lock, and a failed connection or a missing schema is one line saying where and why."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from fleet.errors import ConfigError
from fleet.ops.up import UpLock
from fleet.store.db import connect_failure, describe, resolve_url
from fleet.store.embedded import UP_LOCK, UpState, running_up, up_running, write_up_state


def test_a_directory_without_a_running_up_has_no_database(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"set FLEET_DATABASE_URL \(or run fleetctl up\)"):
        resolve_url(None, tmp_path)
    assert not (tmp_path / ".fleet").exists()
    assert resolve_url("postgresql://db/x", tmp_path) == "postgresql://db/x"


def test_the_url_of_a_running_up_is_used_only_while_it_holds_its_lock(tmp_path: Path) -> None:
    (tmp_path / ".fleet").mkdir()
    url = f"postgresql://postgres:@/postgres?host={tmp_path}/.fleet/pgdata"
    write_up_state(tmp_path, UpState(4242, url, True))
    assert not up_running(tmp_path) and running_up(tmp_path) is None  # a state file alone is stale
    lock = UpLock(tmp_path / UP_LOCK)
    assert lock.acquire() is None
    try:
        assert up_running(tmp_path) and resolve_url(None, tmp_path) == url
        # A probe does not keep the lock: a second `up` still finds the first one's pid.
        assert UpLock(tmp_path / UP_LOCK).acquire() is not None
        write_up_state(tmp_path, UpState(4242, None, False))  # starting, or given a URL of its own
        with pytest.raises(ConfigError, match=r"pid 4242"):
            resolve_url(None, tmp_path)
    finally:
        lock.release()
    assert running_up(tmp_path) is None
    assert UpLock(tmp_path / UP_LOCK).acquire() is None  # a probe while free left nothing held


FAILURES = [
    (
        'connection failed: connection to server at "127.0.0.1", port 5499 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?",
        "postgresql://u:s3cret@127.0.0.1:5499/db",
        "cannot connect to 127.0.0.1:5499: connection refused",
    ),
    (
        'connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  '
        'password authentication failed for user "fleet"',
        "host=db.internal user=fleet password=s3cret",
        'cannot connect to db.internal:5432: password authentication failed for user "fleet"',
    ),
    (
        "failed to resolve host 'nohost': [Errno -2] Name or service not known",
        "postgresql://nohost/db",
        "cannot connect to nohost:5432: failed to resolve host 'nohost': [Errno -2] Name or service "
        "not known",
    ),
    (
        'connection is bad: connection to server on socket "/run/pg/.s.PGSQL.5432" failed: '
        "No such file or directory\n\tIs the server running locally?",
        "postgresql:///db?host=/run/pg",
        "cannot connect to /run/pg:5432: no such file or directory",
    ),
]


@pytest.mark.parametrize(("message", "url", "line"), FAILURES)
def test_a_failed_connection_is_one_line_naming_host_port_and_cause(
    message: str, url: str, line: str
) -> None:
    said = connect_failure(psycopg.OperationalError(message), url)
    assert said == line and "s3cret" not in said


def test_a_missing_relation_of_fleet_says_to_migrate() -> None:
    e = psycopg.errors.UndefinedTable(
        'relation "fleet.processes" does not exist\nLINE 1: INSERT INTO fleet.processes ...\n  ^'
    )
    assert describe(e) == (
        'relation "fleet.processes" does not exist: the database has no fleet schema, or an older one; '
        "run `fleetctl migrate`"
    )
    assert describe(psycopg.OperationalError("server closed the connection unexpectedly\n\thint")) == (
        "server closed the connection unexpectedly"
    )
