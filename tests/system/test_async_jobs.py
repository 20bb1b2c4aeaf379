"""`async def` jobs in real worker processes: run to completion on the worker's event loop beside
sync jobs, cancelled by timeout, fencing and stop as CancelledError, their leases renewed, a
thousand at once in one process."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    job_events,
    log_events,
    one_run,
    processes,
    scalar,
    start_worker,
    wait_for,
    worker_cmd,
)

ASYNC_APP = ("--app", "fleet_async_test_jobs")
APP_SOURCE = Path(__file__).resolve().parents[1] / "apps" / "fleet_async_test_jobs.py"


def async_worker(procs: list[Proc], db_url: str, tmp: Path, wid: str, *flags: str) -> Proc:
    """A worker of the async test jobs only: no handler threads, its runs on the event loop."""
    p = Proc(
        worker_cmd(*ASYNC_APP, "--id", wid, *flags),
        env_for(db_url, FLEET_TEST_DIR=str(tmp)),
        tmp / f"{wid}.log",
    )
    procs.append(p)
    return p


def run_row(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    r: dict[str, Any] | None = conn.execute(
        "SELECT *, status::text AS status FROM fleet.job_runs WHERE schedule_name = 's'"
    ).fetchone()
    assert r is not None
    return r


def outcomes(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        r["outcome"]
        for r in conn.execute("SELECT outcome FROM fleet.job_attempts ORDER BY attempt, started_at")
    ]


def add_runs(
    conn: psycopg.Connection[Any], schedule: str, job: str, n: int, args: str = "{}", extra: str = ""
) -> None:
    apply_text(
        conn,
        f'[[schedule]]\nname = "{schedule}"\nevery = "1d"\njob = "{job}"\nargs = {args}\noverlap = "allow"\n'
        f'start_at = "2099-01-01T00:00:00Z"\n{extra}',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, '2026-01-01'::timestamptz + make_interval(secs => g), job, args, 'allow', now() "
        "FROM fleet.schedules, generate_series(1, %s) g WHERE name = %s",
        (n, schedule),
    )


def test_sync_and_async_jobs_mix_in_one_worker(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    add_runs(conn, "plain", "noop", 20)
    add_runs(conn, "awaits", "async_sleep", 20, "{ seconds = 0.3 }")
    add_runs(conn, "waits", "async_sleep", 5, "{ seconds = 0.2, ctx_sleep = true }")
    # One attempt only: a retry could fall due before the worker is idle, or after it.
    add_runs(conn, "wrong", "returns_coroutine", 1, extra="retry = { max_attempts = 1 }\n")
    with processes() as procs:
        w = start_worker(
            procs, db_url, tmp_path, "a", *ASYNC_APP, *FAST, "--concurrency", "2", "--until-idle"
        )
        assert w.wait(30) == 0, w.output()[-3000:]
    by = {
        r["schedule_name"]: (r["n"], r["done"])
        for r in conn.execute(
            "SELECT schedule_name, count(*) AS n, count(*) FILTER (WHERE status = 'done') AS done "
            "FROM fleet.job_runs GROUP BY 1"
        )
    }
    assert by == {"plain": (20, 20), "awaits": (20, 20), "waits": (5, 5), "wrong": (1, 0)}, by
    events = job_events(tmp_path)
    assert sum(1 for e in events if e[0] == "done") == 45 and {e[4] for e in events} == {str(w.pid)}
    # A sync handler's coroutine was not run, and its attempt is no success.
    wrong = conn.execute(
        "SELECT last_error, failures, status::text AS status FROM fleet.job_runs "
        "WHERE schedule_name = 'wrong'"
    ).fetchone()
    assert wrong is not None and (wrong["failures"], wrong["status"]) == (1, "dead"), wrong
    assert "returned coroutine, an awaitable that a handler thread cannot run" in wrong["last_error"]


def test_an_async_timeout_cancels_the_coroutine(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(
        conn, "async_sleep", "{ seconds = 30 }", timeout='"1s"', retry='{ max_attempts = 2, base = "1s" }'
    )
    with processes() as procs:
        async_worker(procs, db_url, tmp_path, "a", *FAST)
        wait_for(lambda: run_row(conn)["status"] == "dead", timeout=20, what="dead after two timeouts")
    assert outcomes(conn) == ["timeout", "dead"] and "timed out" in run_row(conn)["last_error"]
    assert [e[0] for e in job_events(tmp_path)] == ["start", "cancelled"] * 2


def test_an_async_run_is_renewed_then_fenced_like_a_sync_one(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "async_sleep", "{ seconds = 60, ctx_sleep = true }")
    with processes() as procs:
        a = async_worker(procs, db_url, tmp_path, "a", *FAST)
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="the handler to start")
        first = run_row(conn)["locked_until"]
        # Renewed past the 2 s lease by the heartbeat, as a sync run is.
        wait_for(lambda: run_row(conn)["locked_until"] > first, timeout=5, what="a renewal")
        wait_for(
            lambda: scalar(conn, "SELECT now() > %s::timestamptz", (first,)),
            timeout=5,
            what="the first lease's end",
        )
        assert (run_row(conn)["status"], run_row(conn)["attempts"]) == ("running", 1)
        # Another worker takes the run over: the next heartbeat fences the attempt and cancels it.
        conn.execute(
            "UPDATE fleet.job_runs SET attempts = 2, locked_by = 'other', "
            "locked_until = now() + interval '1 hour'"
        )
        wait_for(
            lambda: any(e[0] == "cancelled" for e in job_events(tmp_path)),
            timeout=10,
            what="the cancellation",
        )
        assert any(e["event"] == "heartbeat_lost" for e in log_events(a))
        r = run_row(conn)
        assert (r["status"], r["attempts"], r["locked_by"]) == ("running", 2, "other")
        assert a.popen.poll() is None


def test_sigterm_hands_an_async_run_back(db_url: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    one_run(conn, "async_sleep", "{ seconds = 60 }")
    with processes() as procs:
        a = async_worker(procs, db_url, tmp_path, "a", *FAST, "--grace", "0.5")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="the handler to start")
        a.signal(signal.SIGTERM)
        assert a.wait(10) == 0
    assert [e[0] for e in job_events(tmp_path)] == ["start", "cancelled"]
    assert outcomes(conn) == ["handed_back"] and run_row(conn)["status"] == "pending"


def test_one_worker_runs_a_thousand_async_handlers_at_once(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    add_runs(conn, "many", "async_sleep", 1000, "{ seconds = 1 }")
    with processes() as procs:
        w = async_worker(procs, db_url, tmp_path, "a", "--async-concurrency", "1000", "--until-idle")
        assert w.wait(60) == 0, w.output()[-3000:]
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 1000
    # Peak overlap of the handlers, from their own start and done lines.
    moments = sorted((float(e[5]), 1 if e[0] == "start" else -1) for e in job_events(tmp_path))
    running = peak = 0
    for _, step in moments:
        running += step
        peak = max(peak, running)
    span = moments[-1][0] - moments[0][0]
    print(f"1,000 async handlers of 1 s: peak {peak} at once, first start to last done {span:.2f} s")
    assert peak == 1000 and span < 3, (peak, span)


def test_a_blocked_event_loop_is_logged_naming_the_run_that_blocks_it(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    add_runs(conn, "blocks", "async_blocks", 1, "{ seconds = 3 }")
    add_runs(conn, "waits", "async_sleep", 1, "{ seconds = 0.2 }")  # delayed by the other, not blocking

    def done() -> int:
        return int(scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'"))

    with processes() as procs:
        w = async_worker(procs, db_url, tmp_path, "a", *FAST)
        wait_for(lambda: done() == 2, timeout=30, what="both runs done")
        wait_for(lambda: "event_loop_resumed" in w.output(), what="the loop to be seen running again")
        # A worker paused as a whole (its loop included) has no blocked loop to report.
        w.signal(signal.SIGSTOP)
        time.sleep(2.5)  # the length of the pause is what this step is about
        w.signal(signal.SIGCONT)
        add_runs(conn, "after", "async_sleep", 1, "{ seconds = 0.1 }")
        wait_for(lambda: done() == 3, timeout=30, what="a run after the pause")
        events = log_events(w)
    blocked = [e for e in events if e["event"] == "event_loop_blocked"]
    resumed = [e for e in events if e["event"] == "event_loop_resumed"]
    assert len(blocked) == 1 and len(resumed) == 1, [e["event"] for e in events]
    b, r = blocked[0], resumed[0]
    assert (b["schedule"], b["slot"], b["attempt"], b["job"]) == (
        "blocks",
        "2026-01-01T00:00:01Z",
        1,
        "async_blocks",
    ), b
    assert b["worker_id"] == "a" and b["blocked_s"] >= 1.0 and b["in_flight"] == 2, b
    line = next(i for i, s in enumerate(APP_SOURCE.read_text().splitlines(), 1) if "time.sleep(float" in s)
    assert b["where"] == f"{APP_SOURCE}:{line}", b
    assert {k: r[k] for k in ("schedule", "job", "attempt")} == {
        "schedule": "blocks",
        "job": "async_blocks",
        "attempt": 1,
    }
    assert 2.8 <= r["blocked_s"] <= 4.0, r
