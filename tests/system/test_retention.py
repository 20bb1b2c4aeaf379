"""Retention with real ticker processes: two tickers share each pass, one killed mid-pass leaves
nothing half-done and the other goes on; a pass runs once per period."""

from __future__ import annotations

import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from tests.support import Proc, apply_text, env_for, log_events, processes, scalar, ticker_cmd, wait_for

OLD = 6000  # old done runs over three schedules, removed 100 per step


def test_two_tickers_share_a_pass_and_one_killed_mid_pass_changes_nothing(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        "".join(
            f'[[schedule]]\nname = "h{i}"\nevery = "1h"\njob = "noop"\nstart_at = "2099-01-01T00:00:00Z"\n'
            for i in range(3)
        )
        + 'retention = "2d"\n',  # h2's own
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, finished_at)"
        " SELECT s.name, now() - interval '40 days' - g * interval '1 minute', 'noop', 'done', 1,"
        "        now() - interval '40 days', now() - interval '40 days'"
        " FROM fleet.schedules s, generate_series(1, %s) g",
        (OLD // 3,),
    )
    # what stays: a dead run, a pending one, recent ones (and under h2's 2 days, 3 days old goes)
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, finished_at)"
        " SELECT s.name, now() - v.age, 'noop', v.status::fleet.run_status, 1, now() - v.age,"
        "        CASE WHEN v.status <> 'pending' THEN now() - v.age END"
        " FROM fleet.schedules s, (VALUES (interval '50 days', 'dead'), (interval '45 days', 'pending'),"
        "      (interval '3 days', 'done'), (interval '1 day', 'done')) v(age, status)"
    )
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at)"
        " SELECT schedule_name, scheduled_for, 1, 'w', run_after FROM fleet.job_runs"
    )
    flags = ("--poll", "0.5", "--retention-batch", "100", "--retention-every", "2")
    with processes() as procs:
        for i in range(2):
            procs.append(Proc(ticker_cmd(*flags, "--id", f"t{i}"), env_for(db_url), tmp_path / f"t{i}.log"))
        wait_for(
            lambda: (
                scalar(conn, "SELECT coalesce(max(steps), 0) FROM fleet.chores WHERE name = 'retention'")
                >= 10
            ),
            timeout=30,
            what="the first pass under way",
        )
        procs[0].signal(signal.SIGKILL)  # mid-pass, perhaps mid-step
        procs[0].wait(10)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 4 + 4 + 3,
            timeout=60,
            what="the old runs removed by the ticker left",
        )
        wait_for(
            lambda: len([e for e in log_events(procs[1]) if e["event"] == "retention_pass"]) >= 3,
            timeout=30,
            what="three passes",
        )
        killed, survivor = ([e for e in log_events(p) if e["event"] == "retention_pass"] for p in procs)
    left = conn.execute(
        "SELECT schedule_name, status::text AS status, now() - scheduled_for > interval '2 days' AS old"
        " FROM fleet.job_runs ORDER BY 1, 2, 3"
    ).fetchall()
    assert left == [
        *(
            row
            for name in ("h0", "h1")
            for row in (
                {"schedule_name": name, "status": "dead", "old": True},
                {"schedule_name": name, "status": "done", "old": False},
                {"schedule_name": name, "status": "done", "old": True},
                {"schedule_name": name, "status": "pending", "old": True},
            )
        ),
        {"schedule_name": "h2", "status": "dead", "old": True},
        {"schedule_name": "h2", "status": "done", "old": False},
        {"schedule_name": "h2", "status": "pending", "old": True},
    ]
    # attempts went with their runs, and only with them
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 4 + 4 + 3
    passes = sorted(killed + survivor, key=lambda e: str(e["ts"]))
    # each run removed once: the passes together count every old run (and h2's 3-day-old one)
    assert sum(e["runs"] for e in passes) == OLD + 1, passes
    assert passes[0]["runs"] == OLD + 1 and passes[0]["steps"] >= OLD // 100
    # one pass per period: the next ends at least --retention-every after the one before
    ends = [datetime.fromisoformat(str(e["ts"]).replace("Z", "+00:00")) for e in passes]
    assert all((b - a).total_seconds() >= 1.9 for a, b in zip(ends, ends[1:], strict=False)), ends
