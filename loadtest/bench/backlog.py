"""Rows the benchmark puts in fleet's tables directly: a schedule to hang runs on, due runs, history."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg

# Slots of benchmark runs start here, one second apart (the pgbench update script relies on it).
SLOT_BASE = "2026-01-01 00:00:00+00"


def add_schedule(
    conn: psycopg.Connection[Any],
    name: str = "bench",
    job: str = "bench.noop",
    args: dict[str, Any] | None = None,
    max_attempts: int = 6,
) -> None:
    """A schedule that never comes due by itself (runs are inserted for it), overlap allowed."""
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, args, overlap, max_attempts, next_run_at, timing_hash) "
        "VALUES (%s, interval '1 day', %s, %s::jsonb, 'allow', %s, '2999-01-01', '')",
        (name, job, orjson.dumps(args or {}).decode(), max_attempts),
    )


def insert_runs(
    conn: psycopg.Connection[Any], n: int, schedule: str = "bench", job: str = "bench.noop", first: int = 1
) -> None:
    """`n` pending runs, due now."""
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "SELECT %s, %s::timestamptz + make_interval(secs => g), %s, 'allow', now() "
        "FROM generate_series(%s::int, %s::int) g",
        (schedule, SLOT_BASE, job, first, first + n - 1),
    )


def insert_history(conn: psycopg.Connection[Any], n: int, schedule: str = "history") -> None:
    """`n` finished runs (done, with their times), as a long-running installation accumulates them."""
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, status, attempts, run_after, "
        "                      started_at, finished_at, last_outcome) "
        "SELECT %s, t, 'bench.noop', 'allow', 'done', 1, t, t, t + interval '10 ms', 'done' "
        "FROM (SELECT '2020-01-01 00:00:00+00'::timestamptz + make_interval(secs => g) AS t "
        "      FROM generate_series(1, %s::int) g) s",
        (schedule, n),
    )


def reset_runs(conn: psycopg.Connection[Any]) -> None:
    """Empty job_runs and job_attempts (and forget processes), then vacuum and analyze."""
    conn.execute("TRUNCATE fleet.job_attempts, fleet.job_runs")
    conn.execute("DELETE FROM fleet.processes")
    conn.execute("VACUUM ANALYZE fleet.job_runs")
    conn.execute("VACUUM ANALYZE fleet.job_attempts")
