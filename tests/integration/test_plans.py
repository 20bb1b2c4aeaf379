"""The hot statements keep using their indexes when the tables hold many finished rows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.store.queries import q
from fleet.worker.claim import claim_params

UTC = UTC
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def big(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, overlap, timing_hash, next_run_at) "
        "SELECT 's' || g, '1 hour', 'noop', 'allow', 'x', %s + make_interval(hours => g) "
        "FROM generate_series(1, 10000) g",
        (T0,),
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, finished_at) "
        "SELECT 's' || (g %% 10000 + 1), %s - make_interval(secs => g), 'noop', 'done', 1, %s, %s "
        "FROM generate_series(1, 100000) g",
        (T0, T0, T0),
    )
    # one pending run and one running run whose lease expired
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after) VALUES ('s1', %s, 'noop', %s)",
        (T0, T0),
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, locked_until) "
        "VALUES ('s2', %s, 'noop', 'running', 1, %s, %s)",
        (T0, T0, T0),
    )
    conn.execute("ANALYZE")
    return conn


def plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    return "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + q(name), params))


def test_hot_statements_use_their_indexes(big: psycopg.Connection[Any]) -> None:
    params = claim_params(worker_id="w", jobs=["noop"], limit=100, lease_s=10, now=T0 + timedelta(seconds=1))
    claim = plan(big, "run_claim", params)
    assert "Seq Scan on fleet.job_runs" not in claim, claim
    assert "job_runs_pending" in claim, claim  # due pending runs
    # a run waiting to retry looks its schedule's pause up by its key, when it is one
    assert "Seq Scan on fleet.schedules" not in claim and "schedules_pkey" in claim, claim
    assert "job_runs_leases" in claim or "job_runs_open" in claim, claim  # expired leases
    # runs that did not take a gate are found by one hashed lookup each, not a loop over the gates
    skipped = claim[claim.index("CTE skipped") : claim.index("CTE out")]
    assert "hashed SubPlan" in skipped and "Nested Loop Anti Join" not in skipped, skipped

    due = plan(
        big,
        "schedule_due",
        {
            "now": T0 + timedelta(hours=2),
            "lookahead": timedelta(minutes=1),
            "limit": 100,
            "retry_broken": timedelta(minutes=10),
        },
    )
    assert "schedules_due" in due and "Seq Scan on fleet.schedules" not in due, due
    withdraw = plan(big, "slot_withdraw", {"names": ["s1"], "rewind": True, "now": T0})
    assert "Seq Scan on fleet.job_runs" not in withdraw, withdraw

    hb = plan(
        big,
        "run_heartbeat",
        {"now": None, "worker": "w", "lease_s": 10, "names": ["s2"], "slots": [T0], "attempts": [1]},
    )
    assert "Seq Scan on fleet.job_runs" not in hb, hb
    fin = plan(
        big,
        "run_finish",
        {
            "now": None,
            "done_names": [],
            "done_slots": [],
            "done_attempts": [],
            "names": ["s2"],
            "slots": [T0],
            "attempts": [1],
            "statuses": ["done"],
            "outcomes": ["done"],
            "errors": [None],
            "delays": [0.0],
            "spent": [0],
            "results": [None],
            "worker": "w",
            "host": "h",
            "pid": 1,
        },
    )
    assert "Seq Scan on fleet.job_runs" not in fin, fin
    assert "Index Scan using job_runs_open" in fin[fin.index("CTE ungate") :], fin  # a gate's waiting run

    mat = plan(
        big,
        "slot_materialize",
        {
            "names": ["s1"],
            "slots": [T0],
            "statuses": ["pending"],
            "reasons": [None],
            "start_bys": [None],
            "windows": [None],
            "origin": "schedule",
            "now": None,
            "trace_id": None,
            "span_id": None,
        },
    )
    assert "Seq Scan on fleet.job_runs" not in mat, mat

    wait = plan(big, "run_next_wait", {"jobs": ["noop"], "now": None})
    assert "Seq Scan on fleet.job_runs" not in wait, wait

    # The ticker's statements on runs created ahead read only those, through their partial index.
    margin = timedelta(seconds=2)
    confirm = plan(big, "run_confirm_ahead", {"now": None, "margin": margin, "limit": 100})
    assert "Seq Scan on fleet.job_runs" not in confirm and confirm.count("job_runs_start_by") == 2, confirm
    stale = plan(big, "run_stale", {"names": ["s1"], "now": None})
    assert "Seq Scan on fleet.job_runs" not in stale and "job_runs_start_by" in stale, stale
    settle = plan(
        big, "run_settle", {"names": ["s1"], "slots": [T0], "reasons": [None], "windows": [None], "now": None}
    )
    assert "Seq Scan on fleet.job_runs" not in settle, settle
    tick_wait = plan(big, "schedule_next_wait", {"now": None, "lookahead": margin, "margin": margin})
    assert "Seq Scan on fleet.job_runs" not in tick_wait and "job_runs_start_by" in tick_wait, tick_wait


def test_round_plans_hold_with_stale_statistics(conn: psycopg.Connection[Any]) -> None:
    """Statistics taken while no run was open, then a backlog: the claim still walks the lease and
    pending indexes in order (no scan and sort of the whole backlog) and the finish probes the
    primary key."""
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, overlap, timing_hash) "
        "VALUES ('s1', '1 hour', 'noop', 'allow', 'x')"
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, status, attempts, run_after, "
        "                      finished_at) "
        "SELECT 's1', %s - make_interval(days => 1, secs => g), 'noop', 'allow', 'done', 1, %s, %s "
        "FROM generate_series(1, 100000) g",
        (T0, T0, T0),
    )
    conn.execute("VACUUM ANALYZE fleet.job_runs")
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "SELECT 's1', %s - make_interval(secs => g), 'noop', 'allow', %s - make_interval(secs => g) "
        "FROM generate_series(1, 20000) g",
        (T0, T0),
    )
    params = claim_params(worker_id="w", jobs=["noop"], limit=100, lease_s=10, now=T0)
    with conn.transaction():
        conn.execute(q("round_configure"))
        claim = plan(conn, "run_claim", params)
        fin = plan(
            conn,
            "run_finish",
            {
                "now": None,
                "done_names": ["s1"] * 100,
                "done_slots": [T0 - timedelta(seconds=g) for g in range(1, 101)],
                "done_attempts": [1] * 100,
                "names": [],
                "slots": [],
                "attempts": [],
                "statuses": [],
                "outcomes": [],
                "errors": [],
                "delays": [],
                "spent": [],
                "results": [],
                "worker": "w",
                "host": "h",
                "pid": 1,
            },
        )
    expired = claim[claim.index("CTE expired") : claim.index("CTE due")]
    assert "Index Scan using job_runs_leases" in expired and "Sort" not in expired, claim
    due = claim[claim.index("CTE due") : claim.index("CTE cand")]
    assert "Index Scan using job_runs_pending" in due and "Sort" not in due, claim
    fin_update = fin[fin.index("CTE fin") : fin.index("CTE history")]
    assert "job_runs_pkey" in fin_update and "Join Filter" not in fin_update, fin
    # without the round's settings the same statistics lead the claim to read and sort open runs
    assert "Sort" in (p := plan(conn, "run_claim", params))[p.index("CTE expired") : p.index("CTE cand")]


def pending_after_stale_statistics(conn: psycopg.Connection[Any], run_after: datetime) -> None:
    """20,000 schedules with one pending run each, due at `run_after`, and job_runs' statistics
    taken before any of the runs existed."""
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, overlap, timing_hash) "
        "SELECT 's' || g, '1 hour', 'noop', 'skip', 'x' FROM generate_series(1, 20000) g"
    )
    conn.execute("VACUUM ANALYZE fleet.job_runs")  # no run yet
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after) "
        "SELECT 's' || g, %s, 'noop', %s FROM generate_series(1, 20000) g",
        (run_after, run_after),
    )


def analyzed(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    """The statement's plan as it ran, with row counts."""
    rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + q(name), params)
    return "\n".join(r["QUERY PLAN"] for r in rows)


def test_next_wait_reads_one_run_of_many_created_ahead(conn: psycopg.Connection[Any]) -> None:
    """An idle worker asks when the next run comes due. With many runs created ahead of their time
    (a lookahead over many schedules) and statistics taken before they existed, the answer is the
    first entry of the pending index, not an aggregate over every run to come."""
    pending_after_stale_statistics(conn, T0 + timedelta(minutes=1))
    with conn.transaction():
        conn.execute(q("round_configure"))
        got = analyzed(conn, "run_next_wait", {"jobs": ["noop"], "now": T0})
        wait = conn.execute(q("run_next_wait"), {"jobs": ["noop"], "now": T0}).fetchone()
    assert wait is not None and wait["wait_s"] == 60.0
    pending = [line for line in got.splitlines() if "job_runs_pending" in line]
    assert pending and all("Index Scan" in line or "Index Only Scan" in line for line in pending), got
    assert re.search(r"actual rows=1(\.00)? loops=1\)", pending[0]), got  # one entry read, of 20,000
    # the only aggregate is the earliest of the jobs' first entries, one per job
    lines = got.splitlines()
    aggregates = [i for i, line in enumerate(lines) if "Aggregate" in line]
    assert all("Function Scan on unnest" in lines[i + 1] for i in aggregates), got
    assert "Sort" not in got and "Bitmap" not in got, got


def test_the_rollup_asks_for_one_due_run(conn: psycopg.Connection[Any]) -> None:
    """The roll-up puts its merge off while a run is due and waiting (fleet.health.rollup): it reads the
    first entry of the pending index, however many runs wait and however stale the statistics."""
    pending_after_stale_statistics(conn, T0)
    later = {"now": T0 + timedelta(minutes=1)}
    got = analyzed(conn, "run_due_first", later)
    assert conn.execute(q("run_due_first"), later).fetchone() == {"run_after": T0}
    assert conn.execute(q("run_due_first"), {"now": T0 - timedelta(seconds=1)}).fetchone() is None
    pending = [line for line in got.splitlines() if "job_runs_pending" in line]
    assert pending and all("Index" in line for line in pending), got
    assert re.search(r"actual rows=1(\.00)? loops=1\)", pending[0]), got  # one entry read, of 20,000
    assert "Sort" not in got and "Bitmap" not in got and "Seq Scan" not in got, got


def test_a_window_is_read_through_its_index_and_a_claim_reads_none(big: psycopg.Connection[Any]) -> None:
    # A handler's first read of its window looks up the newest success before its slot: one probe
    # of job_runs_done (fleet.previous_success, inlined), not a walk of the schedule's history or of
    # the table, even with a backlog of 20,000 open and dead runs of the schedule in between. The
    # claim itself looks nothing up.
    big.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, run_after) "
        "SELECT 's1', %s - make_interval(secs => g / 10.0), 'noop', "
        "(ARRAY['pending', 'running', 'dead', 'skipped'])[g %% 4 + 1]::fleet.run_status, %s "
        "FROM generate_series(1, 20000) g",
        (T0, T0),
    )
    big.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, run_after, attempts, locked_by) "
        "VALUES ('s1', %s, 'noop', 'running', %s, 1, 'w')",
        (T0 + timedelta(seconds=1), T0),
    )
    big.execute("ANALYZE fleet.job_runs")
    params = claim_params(worker_id="w", jobs=["noop"], limit=100, lease_s=10, now=T0 + timedelta(seconds=1))
    assert "job_runs_done" not in plan(big, "run_claim", params)
    look = {"name": "s1", "slot": T0 + timedelta(seconds=1), "attempt": 1, "worker": "w"}
    got = plan(big, "run_window_look", look)
    assert "Index Scan Backward using job_runs_done" in got, got
    assert "Seq Scan" not in got and "Sort" not in got, got
    with big.transaction(force_rollback=True):
        rows = big.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + q("run_window_look"), look).fetchall()
    nodes = _nodes(rows[0]["QUERY PLAN"][0]["Plan"])
    (probe,) = [n for n in nodes if n.get("Index Name") == "job_runs_done"]
    assert probe["Actual Loops"] == 1 and probe["Actual Rows"] <= 1, probe
    assert probe["Shared Hit Blocks"] + probe["Shared Read Blocks"] <= 5, probe
    assert not any(n.get("Node Type") == "Seq Scan" for n in nodes), nodes


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


def test_a_claim_reads_no_run_of_other_jobs(big: psycopg.Connection[Any]) -> None:
    """Another job's backlog costs a claim nothing: with 20,000 runs of another job due before its
    own, a claim for `noop` seeks to its one due run (a worker's async jobs behind a backlog of its
    sync ones, a pool whose jobs sit beside another pool's backlog)."""
    big.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after) "
        "SELECT 's3', %s + make_interval(secs => g), 'other', %s - interval '1 hour' "
        "FROM generate_series(1, 20000) g",
        (T0, T0),
    )
    big.execute("ANALYZE fleet.job_runs")
    params = claim_params(worker_id="w", jobs=["noop"], limit=100, lease_s=10, now=T0 + timedelta(seconds=1))
    with big.transaction():
        big.execute(q("round_configure"))
        got = analyzed(big, "run_claim", params)
    due = got[got.index("CTE due") : got.index("CTE cand")]
    pending = [line for line in due.splitlines() if "job_runs_pending" in line]
    assert pending and "Index Scan" in pending[0], due
    assert re.search(r"actual rows=1(\.00)? loops=1\)", pending[0]), due  # its one run, none of the 20,000
    assert "Rows Removed by Filter" not in due and "Sort" not in due, due
