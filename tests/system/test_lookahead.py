"""Slots created ahead of their time, with a real ticker and worker: each run starts at its slot's
time, not before, and not at the worker's next poll.

Two schedules every 4 s, half a second apart, with a 6 s lookahead: the ticker wakes (and its
NOTIFY wakes the worker) 2 s after each slot's time, and the handlers outlast the test. Right after
it claims one schedule's run, nothing but the worker's own reckoning of the next run's time wakes
it for the other's, half a second later; its poll is 30 s.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg

from tests.support import Proc, apply_text, env_for, processes, scalar, start_worker, ticker_cmd, wait_for

LOOKAHEAD_S = 6


def test_a_slot_created_ahead_starts_at_its_time(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        "".join(
            f'[[schedule]]\nname = "{name}"\nevery = "4s"\nstart_at = "2026-01-01T00:00:{at}Z"\n'
            'job = "sleep"\nargs = { seconds = 60 }\ncatchup = "skip"\noverlap = "allow"\n'
            for name, at in (("a", "00.000"), ("b", "00.500"))
        ),
    )
    # Runs created at least 2 s before their time.
    ahead = (
        "SELECT schedule_name, scheduled_for, created_at, started_at FROM fleet.job_runs "
        "WHERE created_at <= scheduled_for - interval '2 s' ORDER BY scheduled_for"
    )
    with processes() as procs:
        procs.append(
            Proc(
                ticker_cmd("--poll", "0.5", "--lookahead", str(LOOKAHEAD_S), "--id", "t"),
                env_for(db_url),
                tmp_path / "t.log",
            )
        )
        start_worker(procs, db_url, tmp_path, "w", "--poll", "30", "--concurrency", "20")
        early = wait_for(lambda: conn.execute(ahead).fetchall(), what="runs created ahead")
        now = scalar(conn, "SELECT now()")
        assert all(r["started_at"] is None for r in early if r["scheduled_for"] > now)
        wait_for(
            lambda: sum(1 for r in conn.execute(ahead) if r["started_at"] is not None) >= 6,
            timeout=60,
            what="six runs created ahead to start",
        )
    rows = [r for r in conn.execute(ahead).fetchall() if r["started_at"] is not None]
    assert {r["schedule_name"] for r in rows} == {"a", "b"}
    lags = [(r["started_at"] - r["scheduled_for"]).total_seconds() for r in rows]
    assert min(lags) >= 0, lags  # never before its time
    # Milliseconds as a rule; a second is the margin of a busy machine, still below the 1.5 s a
    # run of b would wait for the ticker's next wake-up (or 30 s for the poll).
    assert max(lags) < 1.0, lags


def test_runs_created_ahead_of_a_full_stop_are_settled_by_the_catchup_policy(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Tickers and workers all stop (SIGKILL) with runs created ahead of their time; restarted,
    the slots that fell in the stop are missed: `skip` records them skipped, none runs late, none
    is recorded as an overlap. Runs started before the stop and after it are on time."""
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1s"\njob = "noop"\ncatchup = "skip"\noverlap = "skip"\n',
    )
    done = "SELECT count(*) FROM fleet.job_runs WHERE status = 'done' AND scheduled_for > %s"
    with processes() as procs:

        def start(n: int) -> None:
            ticker = ticker_cmd("--poll", "0.5", "--lookahead", str(LOOKAHEAD_S), "--id", f"t{n}")
            procs.append(Proc(ticker, env_for(db_url), tmp_path / f"t{n}.log"))
            start_worker(procs, db_url, tmp_path, f"w{n}", "--poll", "0.5")

        start(1)
        wait_for(
            lambda: scalar(conn, done, ("-infinity",)) >= 2, timeout=30, what="runs done before the stop"
        )
        for p in procs:
            p.signal(signal.SIGKILL)
            p.wait(10)
        stopped = scalar(conn, "SELECT now()")
        ahead = scalar(
            conn,
            "SELECT count(*) FROM fleet.job_runs WHERE status = 'pending' AND scheduled_for > %s",
            (stopped,),
        )
        assert ahead >= LOOKAHEAD_S - 1  # the runs created ahead, left by the stop
        wait_for(
            lambda: scalar(conn, "SELECT now() > %s + interval '3 s'", (stopped,)),
            timeout=10,
            what="a stop of three seconds",
        )
        restarted = scalar(conn, "SELECT now()")
        start(2)
        wait_for(
            lambda: scalar(conn, done, (restarted,)) >= 2, timeout=30, what="runs done after the restart"
        )
    missed = conn.execute(
        "SELECT status::text AS status, started_at, last_error FROM fleet.job_runs"
        " WHERE scheduled_for > %s + interval '0.5 s' AND scheduled_for < %s - interval '0.5 s'",
        (stopped, restarted),
    ).fetchall()
    assert len(missed) >= 2, missed  # created ahead, then the stop
    assert all(r["status"] == "skipped" and r["started_at"] is None for r in missed), missed
    assert all(r["last_error"].startswith("catchup skip: not started within its grace") for r in missed), (
        missed
    )
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE last_error LIKE 'overlap%'") == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE start_by < now()") == 0
