"""Migrations applied to an empty database give the expected schema; re-running changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from fleet.db import connect
from fleet.migrate import current_version, migrate, migrations

EXPECTED_TABLES = {"schedules", "job_runs", "job_attempts", "fleet_processes", "fleet_migrations"}
EXPECTED_INDEXES = {
    "job_runs_pending",
    "job_runs_leases",
    "job_runs_open",
    "job_runs_finished",
    "schedules_due",
}


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
            tables = {
                r["tablename"]
                for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            }
            assert EXPECTED_TABLES <= tables
            indexes = {
                r["indexname"]
                for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
            }
            assert EXPECTED_INDEXES <= indexes
            pk = conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'job_runs'::regclass AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)"
            ).fetchall()
            assert [r["attname"] for r in pk] == ["schedule_name", "scheduled_for"]
            enum = [
                r["e"] for r in conn.execute("SELECT unnest(enum_range(NULL::fleet_run_status))::text AS e")
            ]
            assert enum == ["pending", "running", "done", "dead", "skipped"]
    finally:
        with connect(server_url, "t") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_migrated_template_is_current(conn: psycopg.Connection[Any]) -> None:
    assert current_version(conn) == migrations()[-1].version


def test_deleting_runs_by_any_path_removes_their_attempts(conn: psycopg.Connection[Any]) -> None:
    """The attempt history has no foreign key (a per-row check on the hot path); a statement-level
    trigger removes a deleted run's attempts, also when the run goes with its schedule."""
    for name in ("a", "b"):
        conn.execute(
            "INSERT INTO schedules (name, every, job, timing_hash) VALUES (%s, '1 hour', 'noop', 'x')",
            (name,),
        )
        conn.execute(
            "INSERT INTO job_runs (schedule_name, scheduled_for, job, run_after) "
            "SELECT %s, t, 'noop', t FROM generate_series('2026-01-01'::timestamptz, '2026-01-01 02:00', '1 hour') t",
            (name,),
        )
        conn.execute(
            "INSERT INTO job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at) "
            "SELECT schedule_name, scheduled_for, n, 'w', now() FROM job_runs, generate_series(1, 2) n "
            "WHERE schedule_name = %s",
            (name,),
        )

    def attempts(name: str) -> int:
        row = conn.execute(
            "SELECT count(*) AS n FROM job_attempts WHERE schedule_name = %s", (name,)
        ).fetchone()
        return int(row["n"]) if row else -1

    assert (attempts("a"), attempts("b")) == (6, 6)
    conn.execute("DELETE FROM job_runs WHERE schedule_name = 'a' AND scheduled_for = '2026-01-01'")
    assert (attempts("a"), attempts("b")) == (4, 6)
    conn.execute("DELETE FROM schedules WHERE name = 'a'")  # cascades to its runs
    assert (attempts("a"), attempts("b")) == (0, 6)
