"""The dashboard's statements read through indexes and stay bounded over many finished rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.queries import q

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def big(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, overlap, timing_hash, next_run_at) "
        "SELECT 's' || g, '1 hour', 'noop', 'allow', 'x', %s FROM generate_series(1, 1000) g",
        (T0,),
    )
    conn.execute(
        "INSERT INTO fleet.job_runs "
        "(schedule_name, scheduled_for, job, status, attempts, run_after, finished_at) "
        "SELECT 's' || (g %% 1000 + 1), %s - make_interval(mins => g), 'noop', 'done', 1, %s, %s "
        "FROM generate_series(1, 100000) g",
        (T0, T0, T0),
    )
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, "
        "finished_at, outcome) SELECT schedule_name, scheduled_for, 1, 'w', run_after, finished_at, 'done' "
        "FROM fleet.job_runs"
    )
    conn.execute("ANALYZE")
    return conn


def plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    return "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + q(name), params))


def test_dashboard_statements_use_indexes_and_limits(big: psycopg.Connection[Any]) -> None:
    strip = plan(big, "run_recent_strip", {"names": ["s1", "s2"], "per": 24})
    assert "Seq Scan on job_runs" not in strip and "job_runs_pkey" in strip, strip
    assert "Limit" in strip, strip

    page = plan(big, "run_page", {"name": "s7", "before": T0 - timedelta(days=3), "limit": 30})
    assert "job_runs_pkey" in page and "Limit" in page and "Seq Scan" not in page, page

    attempts = plan(
        big, "attempt_range", {"name": "s7", "first": T0 - timedelta(days=5), "last": T0, "limit": 2000}
    )
    assert "job_attempts_pkey" in attempts and "Seq Scan" not in attempts, attempts

    held = plan(big, "process_runs", {"ids": ["w1", "w2"], "limit": 1000})
    assert "Seq Scan on job_runs" not in held and "Limit" in held, held

    rows = big.execute(q("run_recent_strip"), {"names": ["s1", "s2"], "per": 24}).fetchall()
    assert len(rows) == 48 and rows[0]["scheduled_for"] > rows[1]["scheduled_for"]


def test_the_overview_verdicts_are_computed_once_per_refresh_and_afresh_after_an_action(
    conn: psycopg.Connection[Any],
) -> None:
    from fleet.ops.dashboard.pages import SharedHealth
    from tests.support import apply_text

    now = [100.0]
    shared = SharedHealth(max_age_s=2.7, clock=lambda: now[0])
    apply_text(conn, '[[schedule]]\nname = "a"\nevery = "60s"\njob = "noop"\n')
    assert [h.name for h in shared.get(conn)] == ["a"]
    apply_text(
        conn,
        '[[schedule]]\nname = "a"\nevery = "60s"\njob = "noop"\n[[schedule]]\nname = "b"\nevery = "60s"\njob = "noop"\n',
    )
    now[0] += 2.0
    assert [h.name for h in shared.get(conn)] == ["a"]  # shared: still the computation of 2 s ago
    now[0] += 0.7
    assert [h.name for h in shared.get(conn)] == ["a", "b"]  # aged out: computed again
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'b'")
    assert [h.verdict for h in shared.get(conn)] == ["OK", "OK"]
    shared.invalidate()  # an action from the dashboard: the next page shows its effect
    assert [h.verdict for h in shared.get(conn)] == ["OK", "PAUSED"]
