"""Runs created ahead of their time on a real database: a worker starts one within its grace, or a
ticker running at its time confirms it, and then it waits for a worker as long as it takes; one
that neither did is a missed slot, which claims leave and the catch-up policy settles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from fleet.admin.repair import schedule_pause
from fleet.store.db import connect
from fleet.store.queries import q
from fleet.ticker import settle
from fleet.ticker.tick import run_once
from fleet.worker.claim import run_claim
from tests.support import apply_text, scalar

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
AHEAD = 2 * MIN
GRACE = 30 * SEC  # a minute's default: half of it
CONFIRMED_AT = GRACE - settle.CONFIRM_MARGIN  # a run is confirmed from this long after its slot


def minutely(conn: psycopg.Connection[Any], catchup: str = "skip", name: str = "s", **extra: str) -> None:
    more = "".join(f"{k} = {v}\n" for k, v in extra.items())
    apply_text(
        conn,
        f'[[schedule]]\nname = "{name}"\nevery = "1m"\njob = "noop"\nstart_at = "2026-11-02T10:00:00Z"\n'
        f'catchup = "{catchup}"\noverlap = "allow"\n{more}',
        now=T0 - 10 * MIN,
    )


def tick(conn: psycopg.Connection[Any], now: datetime) -> settle.SettleResult:
    """One tick of the ticker's loop: slots, then the runs created ahead."""
    run_once(conn, batch_size=100, catchup_limit=1000, lookahead=AHEAD, now=now)
    return settle.run_once(conn, now=now)


def claim(conn: psycopg.Connection[Any], now: datetime) -> list[datetime]:
    attempts, _ = run_claim(conn, worker_id="w", jobs=["noop"], limit=100, lease_s=3600, now=now)
    return sorted(a.slot for a in attempts)


def run(conn: psycopg.Connection[Any], slot: datetime, name: str = "s") -> dict[str, Any]:
    row = conn.execute(
        "SELECT status::text AS status, start_by, last_error FROM fleet.job_runs"
        " WHERE schedule_name = %s AND scheduled_for = %s",
        (name, slot),
    ).fetchone()
    assert row is not None
    return dict(row)


def minutes(*ks: int) -> list[datetime]:
    return [T0 + k * MIN for k in ks]


def test_a_run_created_ahead_carries_its_slot_plus_grace_and_no_other_run_does(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn)
    tick(conn, T0 - MIN)  # creates T0 .. T0+1m ahead
    assert [run(conn, s)["start_by"] for s in minutes(0, 1)] == [T0 + GRACE, T0 + MIN + GRACE]
    tick(conn, T0 + 5 * MIN)  # T0+2m .. T0+4m missed (skip); T0+5m created on time: no start_by
    assert run(conn, T0 + 5 * MIN)["start_by"] is None
    claim(conn, T0 + 5 * MIN)
    assert (
        scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE start_by IS NOT NULL AND status <> 'pending'")
        == 0
    )


def test_a_worker_that_starts_it_within_its_grace_runs_it_without_a_ticker(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn)
    tick(conn, T0 - MIN)
    assert claim(conn, T0 + GRACE) == [T0]  # the last moment of its grace
    assert run(conn, T0)["status"] == "running" and run(conn, T0)["start_by"] is None


def test_a_claim_leaves_a_run_past_its_grace_to_the_ticker(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    tick(conn, T0 - MIN)
    assert claim(conn, T0 + GRACE + timedelta(microseconds=1)) == []
    assert run(conn, T0)["status"] == "pending"


def test_a_ticker_running_at_its_time_confirms_it_and_it_waits_for_a_worker(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn)
    tick(conn, T0 - MIN)
    # Too early: the workers have the first part of the grace to start it, and nothing is written.
    tick(conn, T0 + 10 * SEC)
    assert run(conn, T0)["start_by"] == T0 + GRACE
    wait = conn.execute(
        q("schedule_next_wait"), {"now": T0 + 10 * SEC, "lookahead": AHEAD, "margin": settle.CONFIRM_MARGIN}
    ).fetchone()
    assert wait is not None and wait["wait_s"] == (CONFIRMED_AT - 10 * SEC).total_seconds()
    tick(conn, T0 + CONFIRMED_AT)
    assert run(conn, T0)["start_by"] is None  # seen due by a ticker: as if created on time
    # No worker for ten minutes: the run waits and runs late, whatever the policy (as a slot the
    # ticker created on time does); the slots after it that no ticker saw due are missed.
    r = tick(conn, T0 + 10 * MIN)
    assert r.skipped == 2 and r.kept == 0
    assert claim(conn, T0 + 10 * MIN) == minutes(0, 10)
    assert [run(conn, s)["status"] for s in minutes(1, 2)] == ["skipped", "skipped"]


def test_a_short_grace_is_confirmed_halfway(conn: psycopg.Connection[Any]) -> None:
    minutely(conn, grace='"2s"')
    tick(conn, T0 - MIN)
    tick(conn, T0 + SEC - timedelta(microseconds=1))
    assert run(conn, T0)["start_by"] == T0 + 2 * SEC
    tick(conn, T0 + SEC)
    assert run(conn, T0)["start_by"] is None


def test_a_full_stop_settles_the_runs_created_ahead_by_each_policy(conn: psycopg.Connection[Any]) -> None:
    for policy in ("skip", "latest", "all"):
        minutely(conn, policy, name=policy)
    tick(conn, T0 - MIN)  # T0 .. T0+1m created ahead, then tickers and workers all stop
    r = tick(conn, T0 + 100 * SEC)
    assert r.schedules == 3 and r.kept == 3 and r.skipped == 3
    skip, latest, everything = (
        [run(conn, s, name) for s in minutes(0, 1)] for name in ("skip", "latest", "all")
    )
    assert [x["status"] for x in skip] == ["skipped", "skipped"]
    assert skip[0]["last_error"] == "catchup skip: not started within its grace (30s)"
    assert [x["status"] for x in latest] == ["skipped", "pending"]
    assert (
        latest[0]["last_error"]
        == "catchup latest: not started within its grace (30s); a newer slot runs instead"
    )
    assert [x["status"] for x in everything] == ["pending", "pending"]
    runs = run_claim(conn, worker_id="w", jobs=["noop"], limit=100, lease_s=60, now=T0 + 100 * SEC)[0]
    assert sorted((a.schedule, a.slot) for a in runs) == [
        ("all", T0),
        ("all", T0 + MIN),
        ("latest", T0 + MIN),
    ]
    # Nothing is recorded as an overlap, nothing is left stale.
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE last_error LIKE 'overlap%'") == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE start_by < %s", (T0 + 100 * SEC,)) == 0


def test_latest_runs_no_stale_run_when_the_plan_caught_up_a_newer_slot(conn: psycopg.Connection[Any]) -> None:
    minutely(conn, "latest")
    tick(conn, T0 - MIN)  # T0, T0+1m ahead
    tick(conn, T0 + 10 * MIN + 40 * SEC)  # the plan keeps T0+10m (the newest missed): both stale are skipped
    assert [run(conn, s)["status"] for s in minutes(0, 1)] == ["skipped", "skipped"]
    assert claim(conn, T0 + 10 * MIN + 40 * SEC) == minutes(10)


def test_all_caps_the_stale_runs_at_max_catchup(conn: psycopg.Connection[Any]) -> None:
    minutely(conn, "all", max_catchup="1", max_lateness='"100s"')
    tick(conn, T0 - MIN)
    tick(conn, T0 + 100 * SEC)
    # T0 is older than the newest max_catchup (1); T0+1m is kept, and not too late for max_lateness.
    assert run(conn, T0)["last_error"] == (
        "catchup all: not started within its grace (30s); older than the newest 1 slots caught up"
    )
    assert run(conn, T0 + MIN)["status"] == "pending"
    assert claim(conn, T0 + 100 * SEC) == [T0 + MIN]


def test_a_kept_stale_run_older_than_max_lateness_is_skipped(conn: psycopg.Connection[Any]) -> None:
    minutely(conn, "all", max_lateness='"45s"')
    tick(conn, T0 - MIN)
    tick(conn, T0 + 100 * SEC)
    assert run(conn, T0)["last_error"] == "max_lateness: 0:01:40 late (limit 0:00:45)"
    assert run(conn, T0 + MIN)["status"] == "pending"


def test_stale_runs_of_a_paused_schedule_are_settled_too(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    tick(conn, T0 - MIN)
    assert schedule_pause(conn, "s", now=T0 + 5 * SEC)  # T0 is due and stays; T0+1m goes
    assert tick(conn, T0 + MIN).skipped == 1
    assert run(conn, T0)["status"] == "skipped"


def test_a_schedule_with_slots_still_to_plan_is_settled_only_after_its_plan(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn, "all")
    tick(conn, T0 - MIN)
    assert settle.run_once(conn, now=T0 + 10 * MIN).schedules == 0  # its missed slots are not planned yet
    run_once(conn, batch_size=100, catchup_limit=1000, lookahead=AHEAD, now=T0 + 10 * MIN)
    assert settle.run_once(conn, now=T0 + 10 * MIN).kept == 2  # within max_catchup with the newer ones


def test_a_tick_that_plans_a_newer_due_slot_skips_the_stale_runs_it_stands_for(
    conn: psycopg.Connection[Any],
) -> None:
    # `latest`, back at 10:10: the plan keeps 10:10, which leaves the two runs created ahead no
    # room; the tick skips them itself, in the transaction that creates 10:10, and settle has
    # nothing left to do.
    minutely(conn, "latest")
    tick(conn, T0 - MIN)
    run_once(conn, batch_size=100, catchup_limit=1000, lookahead=AHEAD, now=T0 + 10 * MIN)
    assert [run(conn, s)["status"] for s in minutes(0, 1)] == ["skipped", "skipped"]
    assert run(conn, T0)["last_error"] == (
        "catchup latest: not started within its grace (30s); a newer slot runs instead"
    )
    assert settle.run_once(conn, now=T0 + 10 * MIN).schedules == 0


def test_two_tickers_settle_each_schedule_once(db_url: str, conn: psycopg.Connection[Any]) -> None:
    minutely(conn, "all")
    tick(conn, T0 - MIN)
    run_once(conn, batch_size=100, catchup_limit=1000, lookahead=AHEAD, now=T0 + 5 * MIN)
    with connect(db_url, "fleet-tests other ticker") as other, other.transaction():
        locked = other.execute(
            q("run_confirm_ahead"), {"now": T0 + 5 * MIN, "margin": settle.CONFIRM_MARGIN, "limit": 10}
        ).fetchall()
        assert [r["name"] for r in locked] == ["s"]
        assert settle.run_once(conn, now=T0 + 5 * MIN).schedules == 0  # held by the other: skipped
    assert settle.run_once(conn, now=T0 + 5 * MIN).kept == 2
    assert settle.run_once(conn, now=T0 + 5 * MIN).schedules == 0  # settled once
    assert claim(conn, T0 + 5 * MIN) == minutes(0, 1, 2, 3, 4, 5)  # all: each missed slot runs once


def test_a_changed_grace_recreates_the_runs_created_ahead(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    tick(conn, T0 - MIN)
    minutely(conn, grace='"10s"')
    tick(conn, T0 - MIN)
    assert run(conn, T0)["start_by"] == T0 + 10 * SEC
