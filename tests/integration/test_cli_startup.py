"""`fleetctl status` starts with only what it uses: a monitoring check runs it every minute, and each
module it imports is start-up time (the database driver alone is most of it). Checked in a fresh
process, whose modules are listed once the command has run."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import psycopg

from tests.support import apply_text

# What `status` does not use: the pool and tracing (the long-running processes'), the Client and what
# writes schedules (apply, repair, the schedules file's reader, migrations), and the schedule
# arithmetic (needed only for a cron schedule whose cadence the roll-up has not stored yet).
NOT_FOR_STATUS = (
    "psycopg_pool",
    "opentelemetry",
    "fleet.store.pool",
    "fleet.observe.telemetry",
    "fleet.client",
    "fleet.admin.apply",
    "fleet.admin.repair",
    "fleet.timing.schedfile",
    "fleet.store.migrate",
    "fleet.timing.schedule",
    "fleet.health.rollup",
    "fleet.jobs",
    "tomllib",
)

# Runs fleetctl's entry point, then writes the names of the modules loaded to stderr.
RUN = """
import sys
from fleet.ops.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
print(" ".join(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def modules_of(db_url: str, *args: str) -> tuple[list[Any], set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, "--database-url", db_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return orjson.loads(done.stdout) if "--json" in args else [], set(done.stderr.split())


def imported(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_status_imports_neither_the_pool_nor_tracing_nor_the_writers(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "5m"\njob = "noop"\n')
    health, modules = modules_of(db_url, "status", "--json")
    assert [h["name"] for h in health] == ["s"]
    assert "fleet.ops.status" in modules and "psycopg" in modules  # the command ran
    assert imported(modules, NOT_FOR_STATUS) == []
    assert "fleet.health.results" not in modules  # the JSON is written from the read's dicts
    # the table reads the typed records, and nothing more
    _, modules = modules_of(db_url, "status")
    assert imported(modules, NOT_FOR_STATUS) == []
    assert "fleet.health.results" in modules
