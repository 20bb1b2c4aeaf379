"""Migrations applied to an empty database give the expected schema; re-running changes nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import fleet.store.migrate
from fleet.store.db import connect
from fleet.store.migrate import current_version, migrate, migrations

EXPECTED_TABLES = {
    "schedules",
    "schedule_gates",
    "job_runs",
    "job_attempts",
    "processes",
    "migrations",
    "chores",
    "schedule_stats",
    "slot_outcomes",
    "alert_routes",
    "alert_state",
    "alert_outbox",
    "schedule_audit",
}
EXPECTED_INDEXES = {
    "job_runs_pending",
    "job_runs_leases",
    "job_runs_open",
    "job_runs_finished",
    "schedules_due",
    "chores_pkey",
    "schedule_stats_pkey",
    "slot_outcomes_pkey",
    "slot_outcomes_schedule",
    "slot_outcomes_age",
    "alert_outbox_open",
    "schedule_audit_pkey",
    "schedule_audit_schedule",
    "schedule_audit_at",
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
                for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'fleet'")
            }
            assert tables == EXPECTED_TABLES
            assert _public_objects(conn) == []
            indexes = {
                r["indexname"]
                for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'fleet'")
            }
            assert indexes >= EXPECTED_INDEXES
            pk = conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'fleet.job_runs'::regclass AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)"
            ).fetchall()
            assert [r["attname"] for r in pk] == ["schedule_name", "scheduled_for"]
            enum = [
                r["e"] for r in conn.execute("SELECT unnest(enum_range(NULL::fleet.run_status))::text AS e")
            ]
            assert enum == ["pending", "running", "done", "dead", "skipped"]
    finally:
        with connect(server_url, "t") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _public_objects(conn: psycopg.Connection[Any]) -> list[str]:
    """Every relation, type and function in `public` (an empty database has none)."""
    rows = conn.execute(
        "SELECT relname AS n FROM pg_class WHERE relnamespace = 'public'::regnamespace "
        "UNION ALL SELECT typname FROM pg_type WHERE typnamespace = 'public'::regnamespace "
        "UNION ALL SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1"
    ).fetchall()
    return [r["n"] for r in rows]


@contextmanager
def _scratch_db(server_url: str, name: str) -> Iterator[psycopg.Connection[Any]]:
    with connect(server_url, "t") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with connect(make_conninfo(server_url, dbname=name), "t") as conn:
            yield conn
    finally:
        with connect(server_url, "t") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


APP_TABLE = "CREATE TABLE public.schedules (id serial PRIMARY KEY, title text); INSERT INTO public.schedules (title) VALUES ('mine')"


def test_an_applications_own_public_schedules_is_left_alone(server_url: str) -> None:
    with _scratch_db(server_url, "fleet_mig_app") as conn:
        conn.execute(APP_TABLE)
        migrate(conn)
        assert [r["title"] for r in conn.execute("SELECT title FROM public.schedules")] == ["mine"]
        cols = {
            r["column_name"]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'schedules'"
            )
        }
        assert cols == {"id", "title"}
        assert conn.execute("SELECT count(*) AS n FROM fleet.schedules").fetchone() == {"n": 0}


def test_a_database_migrated_into_public_is_moved_with_its_rows(server_url: str) -> None:
    """The layout of versions 1-3 (everything in `public`, an applied-versions table there) moves to
    the schema `fleet`: runs, attempts and history intact, the attempt trigger still working, and
    nothing of fleet left in `public`."""
    with _scratch_db(server_url, "fleet_mig_legacy") as conn:
        # Build the old layout exactly as the migrator of versions 1-3 did.
        with conn.transaction():
            conn.execute(
                "CREATE TABLE fleet_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for mig in migrations()[:3]:
                conn.execute(mig.sql.encode())
                conn.execute(
                    "INSERT INTO fleet_migrations (version, name) VALUES (%s, %s)", (mig.version, mig.name)
                )
        conn.execute(
            "INSERT INTO schedules (name, every, job, timing_hash) VALUES ('s', '1 hour', 'noop', 'x')"
        )
        conn.execute(
            "INSERT INTO job_runs (schedule_name, scheduled_for, job, run_after, status, attempts, finished_at) "
            "SELECT 's', t, 'noop', t, 'done', 1, t FROM generate_series('2026-01-01'::timestamptz, '2026-01-01 09:00', '1 hour') t"
        )
        conn.execute(
            "INSERT INTO job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, outcome) "
            "SELECT schedule_name, scheduled_for, 1, 'w', scheduled_for, 'done' FROM job_runs"
        )
        conn.execute("INSERT INTO fleet_processes (id, kind, host, pid) VALUES ('h:w', 'worker', 'h', 1)")
        assert current_version(conn) == 3

        assert migrate(conn) == [m.version for m in migrations()[3:]]

        assert _public_objects(conn) == []
        assert current_version(conn) == migrations()[-1].version
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM fleet.schedules) AS s, (SELECT count(*) FROM fleet.job_runs) AS r,"
            " (SELECT count(*) FROM fleet.job_attempts) AS a, (SELECT count(*) FROM fleet.processes) AS p,"
            " (SELECT count(*) FROM fleet.migrations) AS m"
        ).fetchone()
        assert counts == {"s": 1, "r": 10, "a": 10, "p": 1, "m": len(migrations())}
        conn.execute("DELETE FROM fleet.job_runs WHERE scheduled_for < '2026-01-01 05:00'")
        assert conn.execute("SELECT count(*) AS n FROM fleet.job_attempts").fetchone() == {"n": 5}
        assert migrate(conn) == []


def test_migrated_template_is_current(conn: psycopg.Connection[Any]) -> None:
    assert current_version(conn) == migrations()[-1].version


def test_deleting_runs_by_any_path_removes_their_attempts(conn: psycopg.Connection[Any]) -> None:
    """The attempt history has no foreign key (a per-row check on the hot path); a statement-level
    trigger removes a deleted run's attempts, also when the run goes with its schedule."""
    for name in ("a", "b"):
        conn.execute(
            "INSERT INTO fleet.schedules (name, every, job, timing_hash) VALUES (%s, '1 hour', 'noop', 'x')",
            (name,),
        )
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after) "
            "SELECT %s, t, 'noop', t FROM generate_series('2026-01-01'::timestamptz, '2026-01-01 02:00', '1 hour') t",
            (name,),
        )
        conn.execute(
            "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at) "
            "SELECT schedule_name, scheduled_for, n, 'w', now() FROM fleet.job_runs, generate_series(1, 2) n "
            "WHERE schedule_name = %s",
            (name,),
        )

    def attempts(name: str) -> int:
        row = conn.execute(
            "SELECT count(*) AS n FROM fleet.job_attempts WHERE schedule_name = %s", (name,)
        ).fetchone()
        return int(row["n"]) if row else -1

    assert (attempts("a"), attempts("b")) == (6, 6)
    conn.execute("DELETE FROM fleet.job_runs WHERE schedule_name = 'a' AND scheduled_for = '2026-01-01'")
    assert (attempts("a"), attempts("b")) == (4, 6)
    conn.execute("DELETE FROM fleet.schedules WHERE name = 'a'")  # cascades to its runs
    assert (attempts("a"), attempts("b")) == (0, 6)


def test_the_overlap_gate_moves_to_its_own_table_with_the_slot_it_holds(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 12: a gate held on the schedule's row (and the worker's rule on it) moves to
    fleet.schedule_gates; a free gate needs no row; a gate goes with its schedule."""
    every = migrations()
    gate_move = next(m.version for m in every if m.name.endswith("schedule_gates"))
    with _scratch_db(server_url, "fleet_mig_gates") as conn:
        monkeypatch.setattr(
            fleet.store.migrate, "migrations", lambda: [m for m in every if m.version < gate_move]
        )
        monkeypatch.setattr(fleet.store.migrate, "roles_exist", lambda _conn: False)
        migrate(conn)
        conn.execute(
            "INSERT INTO fleet.schedules (name, every, job, timing_hash, running_slot) VALUES"
            " ('held', '1 hour', 'noop', 'x', '2026-01-01T10:00Z'), ('free', '1 hour', 'noop', 'x', NULL)"
        )
        # The rule the roles of earlier versions put on the column.
        conn.execute(
            "CREATE POLICY fleet_worker_gate ON fleet.schedules FOR UPDATE USING (true)"
            " WITH CHECK (running_slot IS NULL)"
        )
        monkeypatch.undo()

        assert migrate(conn)[0] == gate_move

        gates = conn.execute("SELECT name, running_slot FROM fleet.schedule_gates").fetchall()
        assert gates == [{"name": "held", "running_slot": dt.datetime(2026, 1, 1, 10, tzinfo=dt.UTC)}]
        columns = conn.execute(
            "SELECT count(*) AS n FROM information_schema.columns"
            " WHERE table_schema = 'fleet' AND table_name = 'schedules' AND column_name = 'running_slot'"
        ).fetchone()
        assert columns == {"n": 0}
        conn.execute("DELETE FROM fleet.schedules WHERE name = 'held'")
        assert conn.execute("SELECT count(*) AS n FROM fleet.schedule_gates").fetchone() == {"n": 0}
