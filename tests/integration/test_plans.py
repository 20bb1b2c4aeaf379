"""The hot statements keep using their indexes when the tables hold many finished rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from fleet.queries import q

UTC = timezone.utc
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def big(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(
        "INSERT INTO schedules (name, every, job, overlap, timing_hash, next_run_at) "
        "SELECT 's' || g, '1 hour', 'noop', 'allow', 'x', %s + make_interval(hours => g) "
        "FROM generate_series(1, 10000) g",
        (T0,),
    )
    conn.execute(
        "INSERT INTO job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, finished_at) "
        "SELECT 's' || (g %% 10000 + 1), %s - make_interval(secs => g), 'noop', 'done', 1, %s, %s "
        "FROM generate_series(1, 100000) g",
        (T0, T0, T0),
    )
    # one pending run and one running run whose lease expired
    conn.execute(
        "INSERT INTO job_runs (schedule_name, scheduled_for, job, run_after) VALUES ('s1', %s, 'noop', %s)",
        (T0, T0),
    )
    conn.execute(
        "INSERT INTO job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, locked_until) "
        "VALUES ('s2', %s, 'noop', 'running', 1, %s, %s)",
        (T0, T0, T0),
    )
    conn.execute("ANALYZE")
    return conn


def plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    return "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + q(name), params))


def test_hot_statements_use_their_indexes(big: psycopg.Connection[Any]) -> None:
    params = {
        "now": T0 + timedelta(seconds=1),
        "jobs": ["noop"],
        "limit": 100,
        "lease_s": 10,
        "worker": "w",
        "host": "h",
        "pid": 1,
    }
    claim = plan(big, "run_claim", params)
    assert "Seq Scan on job_runs" not in claim, claim
    assert "job_runs_pending" in claim, claim  # due pending runs
    assert "job_runs_leases" in claim or "job_runs_open" in claim, claim  # expired leases

    due = plan(big, "schedule_due", {"now": T0 + timedelta(hours=2), "limit": 100})
    assert "schedules_due" in due and "Seq Scan on schedules" not in due, due

    hb = plan(
        big, "run_heartbeat", {"now": None, "lease_s": 10, "names": ["s2"], "slots": [T0], "attempts": [1]}
    )
    assert "Seq Scan on job_runs" not in hb, hb
    fin = plan(
        big,
        "run_finish",
        {
            "now": None,
            "names": ["s2"],
            "slots": [T0],
            "attempts": [1],
            "statuses": ["done"],
            "outcomes": ["done"],
            "errors": [None],
            "delays": [0.0],
            "spent": [0],
            "started": [T0],
            "trace_ids": [None],
            "span_ids": [None],
            "worker": "w",
            "host": "h",
            "pid": 1,
        },
    )
    assert "Seq Scan on job_runs" not in fin, fin

    mat = plan(
        big,
        "slot_materialize",
        {
            "names": ["s1"],
            "slots": [T0],
            "statuses": ["pending"],
            "reasons": [None],
            "origin": "schedule",
            "now": None,
            "trace_id": None,
            "span_id": None,
        },
    )
    assert "Seq Scan on job_runs" not in mat, mat

    wait = plan(big, "run_next_wait", {"jobs": ["noop"], "now": None})
    assert "Seq Scan on job_runs" not in wait, wait
