"""Test databases: a migrated template built once per session, a fresh copy for each test.

The server is FLEET_DATABASE_URL's, or else the embedded PostgreSQL (started for the session in
`.fleet/pgdata` of the repository and stopped at the end if the session started it). The suite
creates and drops databases there: a server it cannot reach, or a role without CREATEDB, stops the
run at the first test that needs the database, with one line saying so.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from fleet.errors import DatabaseUnavailable
from fleet.store.db import connect
from fleet.store.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count()


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    url = os.environ.get("FLEET_DATABASE_URL")
    if url:
        check_server(url)
        yield url
        return
    from fleet.store.embedded import EMBEDDED_DIR, embedded_url, stop_embedded

    was_running = (ROOT / EMBEDDED_DIR / "postmaster.pid").exists()
    url = embedded_url(ROOT)
    yield url
    if not was_running:
        stop_embedded(ROOT)


def check_server(url: str) -> None:
    """Stop the run with one line when the suite cannot use FLEET_DATABASE_URL's server."""
    try:
        with connect(url, "fleet-tests admin") as admin:
            row = admin.execute(
                "SELECT current_user AS name, rolcreatedb OR rolsuper AS createdb,"
                " rolcreaterole OR rolsuper AS createrole FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except DatabaseUnavailable as e:
        pytest.exit(f"FLEET_DATABASE_URL: {e}", returncode=pytest.ExitCode.USAGE_ERROR)
    if row is None or not (row["createdb"] and row["createrole"]):
        role = row["name"] if row else "this role"
        pytest.exit(
            f"FLEET_DATABASE_URL: role {role!r} cannot create databases and roles, and the test suite "
            "creates and drops a database per test and the fleet's roles with login roles of its own: "
            f"grant them (ALTER ROLE {role} CREATEDB CREATEROLE), or unset FLEET_DATABASE_URL to run "
            "the suite on the embedded PostgreSQL",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return connect(server_url, "fleet-tests admin")


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = f"fleet_tpl_{os.getpid()}"
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    with connect(make_conninfo(server_url, dbname=name), "fleet-tests migrate") as conn:
        migrate(conn)
    yield name
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"fleet_t_{os.getpid()}_{next(_counter)}"
    with _admin(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield make_conninfo(server_url, dbname=name)
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with connect(db_url, "fleet-tests") as c:
        yield c


# With FLEET_TESTS_STRICT=1 (CI sets it) a skipped test fails the run: a test skipped where everything
# it needs should be installed is a test that does not exist.
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("FLEET_TESTS_STRICT") == "1" and _skipped:
        print(f"\nFLEET_TESTS_STRICT: {len(_skipped)} skipped, install what they need: {_skipped[:5]}")
        session.exitstatus = 1
