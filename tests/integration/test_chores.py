"""Chores shared by tickers: each step done by one ticker at a time, progress kept across tickers."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.store import chores
from fleet.store.chores import Chore, Progress, Step
from fleet.store.db import connect

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def test_a_step_is_taken_by_one_ticker_and_its_progress_kept(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    seen: list[tuple[str | None, datetime | None]] = []

    def step(c: psycopg.Connection[Any], p: Progress) -> Step:
        seen.append((p.cursor, p.mark))
        n = int(p.cursor or "0") + 1
        return Step(more=n < 3, cursor=str(n), mark=p.now)

    chore = Chore("counting", every_s=60.0, step=step)
    chores.register(conn, [chore], now=T0)
    chores.register(conn, [chore], now=T0)  # a second ticker registering changes nothing
    assert chores.run_due(conn, [chore], now=T0) == ["counting"]
    assert chores.run_due(conn, [chore], now=T0) == ["counting"]  # more: due at once
    assert chores.run_due(conn, [chore], now=T0) == ["counting"]
    assert seen == [(None, None), ("1", T0), ("2", T0)]
    # done: not due again for every_s
    assert chores.run_due(conn, [chore], now=T0 + timedelta(seconds=59)) == []
    wait = chores.next_wait(conn, [chore], now=T0)
    assert wait is not None and abs(wait - 60.0) < 1e-6
    assert chores.run_due(conn, [chore], now=T0 + timedelta(seconds=60)) == ["counting"]
    assert seen[-1] == ("3", T0)


def test_a_chore_held_by_one_ticker_is_skipped_by_another(conn: psycopg.Connection[Any], db_url: str) -> None:
    inside = threading.Event()
    release = threading.Event()
    steps: list[str] = []

    def slow(c: psycopg.Connection[Any], p: Progress) -> Step:
        steps.append("slow")
        inside.set()
        assert release.wait(10)
        return Step(more=False)

    def fast(c: psycopg.Connection[Any], p: Progress) -> Step:
        steps.append("fast")
        return Step(more=False)

    chores.register(conn, [Chore("shared", 60.0, slow)])
    result: list[list[str]] = []
    holder = threading.Thread(
        target=lambda: result.append(chores.run_due(conn, [Chore("shared", 60.0, slow)]))
    )
    holder.start()
    try:
        assert inside.wait(10)
        with connect(db_url, "other ticker") as other:
            # the row is locked by the first ticker's step: the second skips it without waiting
            assert chores.run_due(other, [Chore("shared", 60.0, fast)]) == []
    finally:
        release.set()
        holder.join(10)
    assert result == [["shared"]]
    assert steps == ["slow"]


def test_a_failed_step_changes_nothing_and_is_tried_again_later(
    conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(c: psycopg.Connection[Any], p: Progress) -> Step:
        c.execute("UPDATE fleet.chores SET cursor = 'half' WHERE name = 'broken'")
        raise RuntimeError("boom")

    def failing_statement(c: psycopg.Connection[Any], p: Progress) -> Step:
        c.execute("SELECT 1 / 0")
        return Step(more=False)

    fine: list[str] = []

    def stepping(c: psycopg.Connection[Any], p: Progress) -> Step:
        fine.append("x")
        return Step(more=False)

    chore, other = Chore("broken", 60.0, broken), Chore("fine", 60.0, stepping)
    chores.register(conn, [chore, other], now=T0)
    # the failure is logged, the other chore still steps, and the connection stays usable
    assert chores.run_due(conn, [chore, other], now=T0) == ["fine"] and fine == ["x"]
    assert '"event":"chore_failed","chore":"broken","error":"RuntimeError: boom"' in capsys.readouterr().out
    row = conn.execute("SELECT cursor, steps FROM fleet.chores WHERE name = 'broken'").fetchone()
    assert row == {"cursor": None, "steps": 0}
    # due again RETRY_S later, for every ticker
    assert chores.run_due(conn, [chore], now=T0 + timedelta(seconds=chores.RETRY_S - 1)) == []
    wait = chores.next_wait(conn, [chore], now=T0)
    assert wait is not None and abs(wait - chores.RETRY_S) < 1e-6
    later = T0 + timedelta(seconds=chores.RETRY_S)
    assert chores.run_due(conn, [Chore("broken", 60.0, failing_statement)], now=later) == []
    assert "DivisionByZero" in capsys.readouterr().out and not conn.broken
    again = later + timedelta(seconds=chores.RETRY_S)
    assert chores.run_due(conn, [Chore("broken", 60.0, lambda c, p: Step(more=False))], now=again) == [
        "broken"
    ]


def test_a_lost_connection_in_a_step_is_raised(conn: psycopg.Connection[Any], db_url: str) -> None:
    with connect(db_url, "fleet-test doomed") as doomed:

        def cut(c: psycopg.Connection[Any], p: Progress) -> Step:
            conn.execute("SELECT pg_terminate_backend(%s)", (c.info.backend_pid,))
            c.execute("SELECT 1")
            return Step(more=False)

        chore = Chore("cut", 60.0, cut)
        chores.register(doomed, [chore], now=T0)
        with pytest.raises(psycopg.OperationalError):
            chores.run_due(doomed, [chore], now=T0)
