"""The dashboard's statements read through indexes and stay bounded over many finished rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.store.queries import q

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

    recent = plan(big, "attempt_recent", {"name": "s7", "limit": 500})
    assert "job_attempts_pkey" in recent and "Limit" in recent and "Seq Scan" not in recent, recent

    held = plan(big, "process_runs", {"ids": ["w1", "w2"], "limit": 1000})
    assert "Seq Scan on job_runs" not in held and "Limit" in held, held

    rows = big.execute(q("run_recent_strip"), {"names": ["s1", "s2"], "per": 24}).fetchall()
    assert len(rows) == 48 and rows[0]["scheduled_for"] > rows[1]["scheduled_for"]


def test_the_overview_verdicts_are_computed_once_per_refresh_and_afresh_after_an_action(
    conn: psycopg.Connection[Any],
) -> None:
    from fleet.ops.dashboard.pages import SharedHealth
    from fleet.ops.status import schedule_health
    from tests.support import apply_text, live_ticker

    now = [100.0]
    computed: list[float] = []

    def compute() -> list[Any]:
        computed.append(now[0])
        return schedule_health(conn)

    one = '[[schedule]]\nname = "a"\nevery = "60s"\njob = "noop"\n'
    shared = SharedHealth(compute, max_age_s=3.0, background=False, clock=lambda: now[0])
    apply_text(conn, one)
    live_ticker(conn)
    assert [h.name for h in shared.get()] == ["a"]
    apply_text(conn, one + one.replace('"a"', '"b"'))
    now[0] += 5.0
    assert [h.name for h in shared.get()] == ["a"]  # shared: the computation of 5 s ago still serves
    now[0] += 1.5
    assert [h.name for h in shared.get()] == ["a", "b"]  # older than twice the period: computed anew
    assert computed == [100.0, 106.5]
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'b'")
    assert [h.verdict for h in shared.get()] == ["OK", "OK"]
    shared.invalidate()  # an action from the dashboard: the next page shows its effect
    assert [h.verdict for h in shared.get()] == ["OK", "PAUSED"]


def test_the_overview_verdicts_are_refreshed_in_the_background_while_a_page_watches(db_url: str) -> None:
    import threading
    import time

    from fleet.ops.dashboard.pages import SharedHealth
    from fleet.ops.status import schedule_health
    from fleet.store.db import connect

    lock = threading.Lock()
    computed: list[float] = []

    with connect(db_url, "t") as c:

        def compute() -> list[Any]:
            with lock:
                computed.append(time.monotonic())
                return schedule_health(c)

        shared = SharedHealth(compute, max_age_s=0.2, watch_s=0.6)
        try:
            shared.get()  # the first page computes; then the thread keeps it fresh
            for _ in range(10):
                time.sleep(0.1)
                started = time.monotonic()
                shared.get()
                assert time.monotonic() - started < 0.05  # served, not computed, while watched
            assert len(computed) >= 4
            time.sleep(1.0)  # nobody watches: the thread stops computing
            idle = len(computed)
            time.sleep(0.6)
            assert len(computed) == idle
        finally:
            shared.close()


def test_the_wait_before_each_attempt_runs_from_the_end_of_the_one_before_or_its_last_renewal(
    conn: psycopg.Connection[Any],
) -> None:
    from fleet.ops.dashboard.pages import slot_page

    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, overlap, timing_hash, next_run_at) "
        "VALUES ('s', '1 hour', 'noop', 'allow', 'x', %s)",
        (T0,),
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, started_at, "
        "finished_at) VALUES ('s', %s, 'noop', 'done', 4, %s, %s, %s)",
        (T0, T0, T0 + timedelta(seconds=100), T0 + timedelta(seconds=101)),
    )
    s = timedelta(seconds=1)
    # 1 failed; 2 lost its lease (renewed last at +12, reclaimed at +20); 3 lost too, recorded before
    # renewals were kept; 4 done.
    for n, start, end, outcome, renewed in (
        (1, 0, 1, "failed", None),
        (2, 10, 20, "lease_expired", 12),
        (3, 20, 70, "lease_expired", None),
        (4, 70, 71, "done", None),
    ):
        conn.execute(
            "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, "
            "finished_at, outcome, renewed_at) VALUES ('s', %s, %s, 'w', %s, %s, %s, %s)",
            (T0, n, T0 + start * s, T0 + end * s, outcome, None if renewed is None else T0 + renewed * s),
        )
    page = slot_page(conn, "s", T0, "http://jaeger/trace/{trace_id}", "http://jaeger")
    # the back-off after a failure; after a lost lease, from its last renewal (the lease running out
    # and the reclaim); unknown after a lease lost before renewals were kept, not 0
    assert [a["waited_s"] for a in page["attempt_history"]] == [None, 9.0, 8.0, None]
