"""Migrations applied to an empty database give the expected schema; re-running changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from fleet.db import connect
from fleet.migrate import current_version, migrate, migrations

EXPECTED_TABLES = {"schedules", "job_runs", "job_attempts", "fleet_processes", "fleet_migrations"}
EXPECTED_INDEXES = {"job_runs_pending", "job_runs_leases", "job_runs_open", "job_runs_finished", "schedules_due"}


def test_migrations_build_the_schema_from_empty(server_url: str) -> None:
    name = "fleet_mig_empty"
    with connect(server_url, "t") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with connect(make_conninfo(server_url, dbname=name), "t") as conn:
            assert current_version(conn) == 0
            applied = migrate(conn)
            assert applied == [m.version for m in migrations()]
            assert migrate(conn) == []
            assert current_version(conn) == migrations()[-1].version
            tables = {r["tablename"] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
            assert EXPECTED_TABLES <= tables
            indexes = {r["indexname"] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
            assert EXPECTED_INDEXES <= indexes
            pk = conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'job_runs'::regclass AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)").fetchall()
            assert [r["attname"] for r in pk] == ["schedule_name", "scheduled_for"]
            enum = [r["e"] for r in conn.execute("SELECT unnest(enum_range(NULL::fleet_run_status))::text AS e")]
            assert enum == ["pending", "running", "done", "dead", "skipped"]
    finally:
        with connect(server_url, "t") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_migrated_template_is_current(conn: psycopg.Connection[Any]) -> None:
    assert current_version(conn) == migrations()[-1].version
