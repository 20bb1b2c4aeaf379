"""What the test suite needs of FLEET_DATABASE_URL's server, said in one line: a run given a role
that cannot create databases or roles, or a server out of reach, stops at its first database test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from fleet.store.db import connect
from tests.support import ROOT, free_port

DATABASE_TESTS = "tests/integration/test_claim.py"


def run_suite(url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", DATABASE_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(params=["NOCREATEDB CREATEROLE", "CREATEDB NOCREATEROLE"])
def role_without_createdb(server_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A login role that can create databases or roles, but not both."""
    name = f"fleet_nocreatedb_{os.getpid()}"
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN " + request.param).format(sql.Identifier(name)))
    yield name
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_role_without_createdb_stops_the_run_with_one_line(
    server_url: str, role_without_createdb: str
) -> None:
    done = run_suite(make_conninfo(server_url, user=role_without_createdb))
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    out = done.stdout + done.stderr
    message = f"FLEET_DATABASE_URL: role '{role_without_createdb}' cannot create databases"
    assert out.count(message) == 1 and "ALTER ROLE" in out, out
    assert "permission denied" not in out and " passed" not in out and " error" not in out, out


def test_a_server_out_of_reach_stops_the_run_with_one_line() -> None:
    port = free_port()
    done = run_suite(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert out.count(f"FLEET_DATABASE_URL: cannot connect to 127.0.0.1:{port}: connection refused") == 1, out
