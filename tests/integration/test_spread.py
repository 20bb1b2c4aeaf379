"""A schedule's start spread on a real database, through the ticker's and the worker's own code: its
runs become claimable at their slot plus an offset hashed from the schedule's name, keep their
nominal slot as their identity, count lateness and their grace from that start, are created anew
when the spread changes, and the start lag is measured from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from fleet.jobs import idempotency_key
from fleet.store.queries import q
from fleet.ticker import settle
from fleet.ticker.tick import run_once as tick_once
from fleet.timing.schedfile import spread_offset
from fleet.worker.claim import run_claim
from fleet.worker.finish import decide, run_finish
from tests.support import apply_text, scalar

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
MS = timedelta(milliseconds=1)
SPREAD = 30 * SEC
HERD = [f"report-{i}" for i in range(20)]


def herd(conn: psycopg.Connection[Any], spread: str = '"30s"', names: list[str] = HERD) -> None:
    """Hourly schedules, all on the hour, spread over `spread`."""
    apply_text(
        conn,
        "".join(
            f'[[schedule]]\nname = "{n}"\nevery = "1h"\njob = "noop"\nspread = {spread}\n'
            f'start_at = "2026-11-02T10:00:00Z"\n'
            for n in names
        ),
        now=T0 - 10 * MIN,
    )


def tick(conn: psycopg.Connection[Any], now: datetime, lookahead: timedelta = timedelta(0)) -> None:
    tick_once(conn, batch_size=100, catchup_limit=1000, lookahead=lookahead, now=now)


def claim(conn: psycopg.Connection[Any], now: datetime) -> list[Any]:
    got, _ = run_claim(conn, worker_id="w", jobs=["noop"], limit=100, lease_s=60, now=now)
    return got


def test_each_run_starts_at_its_slot_plus_the_offset_of_its_schedule(conn: psycopg.Connection[Any]) -> None:
    herd(conn)
    rows = conn.execute("SELECT name, spread_offset FROM fleet.schedules").fetchall()
    offsets = {r["name"]: r["spread_offset"] for r in rows}
    assert offsets == {n: spread_offset(n, SPREAD) for n in HERD}
    assert len(set(offsets.values())) == len(HERD) and all(
        timedelta(0) <= o < SPREAD for o in offsets.values()
    )

    tick(conn, T0 + 50 * MS)  # one ticker creates the whole herd on time
    rows = conn.execute("SELECT schedule_name, scheduled_for, run_after FROM fleet.job_runs").fetchall()
    assert len(rows) == len(HERD)
    assert all(r["scheduled_for"] == T0 and r["run_after"] == T0 + offsets[r["schedule_name"]] for r in rows)

    # Claimed as each offset comes, not all at the top of the hour.
    started: dict[str, datetime] = {}
    for n, offset in sorted(offsets.items(), key=lambda item: item[1]):
        assert n not in {a.schedule for a in claim(conn, T0 + offset - MS)}
        got = claim(conn, T0 + offset)
        for a in got:
            started[a.schedule] = T0 + offset
            # the slot keeps its nominal time as its identity
            assert (
                a.slot == T0
                and a.idempotency_key
                == idempotency_key(a.schedule, T0)
                == f"{a.schedule}:2026-11-02T10:00:00Z"
            )
            assert a.context("w").slot == T0
        assert n in started
    assert started == {n: T0 + o for n, o in offsets.items()}


def test_the_offset_is_the_same_on_every_ticker_and_apply(conn: psycopg.Connection[Any]) -> None:
    herd(conn, names=["a"])
    before = scalar(conn, "SELECT spread_offset FROM fleet.schedules")
    # applied again (another host, a restart): the same offset, nothing written
    herd(conn, names=["a"])
    assert scalar(conn, "SELECT spread_offset FROM fleet.schedules") == before == spread_offset("a", SPREAD)
    # a wider spread moves it; no spread is no offset
    herd(conn, spread='"50m"', names=["a"])
    assert scalar(conn, "SELECT spread_offset FROM fleet.schedules") == spread_offset("a", 50 * MIN)
    herd(conn, spread='"0s"', names=["a"])
    assert conn.execute("SELECT spread, spread_offset FROM fleet.schedules").fetchone() == {
        "spread": None,
        "spread_offset": timedelta(0),
    }


def test_lateness_and_the_grace_of_runs_created_ahead_count_from_the_spread_start(
    conn: psycopg.Connection[Any],
) -> None:
    name = "report-0"
    herd(conn, names=[name])
    offset = spread_offset(name, SPREAD)
    assert offset > 5 * SEC  # the test relies on it (a pinned hash)
    grace = 60 * SEC  # an hour's default
    # Created ahead: it must be started (or seen due) within its grace of its start.
    tick(conn, T0 - 30 * SEC, lookahead=MIN)
    start_by = scalar(conn, "SELECT start_by FROM fleet.job_runs")
    assert start_by == T0 + offset + grace
    assert claim(conn, T0 + offset + grace + MS) == []  # past it unstarted: a missed slot, left
    assert settle.run_once(conn, now=T0 + offset + grace + MS).kept == 1  # to the ticker: latest keeps it
    # A ticker back `grace` + 1 s after the 11:00 slot: late from the slot, on time from its start.
    tick(conn, T0 + 60 * MIN + grace + SEC)
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE scheduled_for = %s", (T0 + 60 * MIN,)) == 1
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules") == 0


def test_changing_the_spread_creates_the_runs_ahead_anew(conn: psycopg.Connection[Any]) -> None:
    herd(conn, names=["a"])
    tick(conn, T0 - 30 * SEC, lookahead=MIN)
    assert scalar(conn, "SELECT run_after FROM fleet.job_runs") == T0 + spread_offset("a", SPREAD)
    apply_text(
        conn,
        '[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\nspread = "10m"\nstart_at = "2026-11-02T10:00:00Z"\n',
        now=T0 - 20 * SEC,
    )
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 0  # withdrawn, next_run_at rewound
    tick(conn, T0 - 10 * SEC, lookahead=MIN)
    assert scalar(conn, "SELECT run_after FROM fleet.job_runs") == T0 + spread_offset("a", 10 * MIN)


def test_the_start_lag_counts_from_the_spread_start(conn: psycopg.Connection[Any]) -> None:
    herd(conn, names=["a"])
    offset = spread_offset("a", SPREAD)
    tick(conn, T0 + 50 * MS)
    (a,) = claim(conn, T0 + offset + 2 * SEC)
    run_finish(conn, [(a, decide(a, "done", None))], worker_id="w", now=T0 + offset + 3 * SEC)
    (row,) = conn.execute(q("run_finished_between"), {"since": T0, "until": T0 + offset + 4 * SEC}).fetchall()
    assert abs(row["start_lag_s"] - 2.0) < 1e-6 and abs(row["claim_latency_s"] - 2.0) < 1e-6
