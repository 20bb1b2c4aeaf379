"""The ticker against a real database: catch-up policies, limits, the database clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

from fleet.ticker.tick import run_once
from tests.support import apply_text, scalar

UTC = UTC
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def _runs(conn: psycopg.Connection[Any], status: str | None = None) -> list[datetime]:
    sql = "SELECT scheduled_for FROM fleet.job_runs"
    if status:
        sql += " WHERE status = %s"
    sql += " ORDER BY scheduled_for"
    return [r["scheduled_for"] for r in conn.execute(sql, (status,) if status else None)]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("skip", []),
        ("latest", [T0.replace(minute=45)]),
        ("all", [T0.replace(minute=15), T0.replace(minute=30), T0.replace(minute=45)]),
    ],
)
def test_catchup_after_outage(conn: psycopg.Connection[Any], policy: str, expected: list[datetime]) -> None:
    # A 15-minute job; the last tick before the outage ran at 10:02, the ticker is back at 10:52.
    apply_text(
        conn,
        f"""
[[schedule]]
name = "quarterly"
every = "15m"
job = "noop"
start_at = "2026-11-02T10:15:00Z"
catchup = "{policy}"
""",
        now=T0 + timedelta(minutes=2),
    )
    back = T0 + timedelta(minutes=52)
    result = run_once(conn, batch_size=10, catchup_limit=100, now=back)
    assert _runs(conn, "pending") == expected
    assert result.created == len(expected)
    nxt = scalar(conn, "SELECT next_run_at FROM fleet.schedules WHERE name = 'quarterly'")
    assert nxt == T0 + timedelta(hours=1) and nxt > back
    # A second tick at the same instant creates nothing more.
    assert run_once(conn, batch_size=10, catchup_limit=100, now=back).created == 0


def test_on_time_slot_is_created_once_per_tick_series(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, '[[schedule]]\nname = "m"\nevery = "1m"\njob = "noop"\ncatchup = "skip"\n', now=T0)
    for s in range(0, 180, 7):  # ticks every 7 s for 3 minutes, each within the grace period
        run_once(conn, batch_size=10, catchup_limit=100, now=T0 + timedelta(seconds=s))
    assert _runs(conn) == [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]


def test_max_lateness_records_skipped(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        """
[[schedule]]
name = "late"
every = "15m"
job = "noop"
start_at = "2026-11-02T10:15:00Z"
catchup = "all"
max_lateness = "20m"
""",
        now=T0,
    )
    run_once(conn, batch_size=10, catchup_limit=100, now=T0 + timedelta(minutes=52))
    assert _runs(conn, "pending") == [T0.replace(minute=45)]
    assert _runs(conn, "skipped") == [T0.replace(minute=15), T0.replace(minute=30)]
    reason = scalar(conn, "SELECT last_error FROM fleet.job_runs WHERE status = 'skipped' LIMIT 1")
    assert "max_lateness" in reason


def test_catchup_all_is_bounded_per_tick(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        """
[[schedule]]
name = "flood"
every = "1s"
job = "noop"
start_at = "2026-11-02T09:00:00Z"
catchup = "all"
max_catchup = 5000
""",
        now=T0,
    )
    r = run_once(conn, batch_size=10, catchup_limit=500, now=T0)
    assert r.created == 500 and r.still_due
    ticks = 1
    while run_once(conn, batch_size=10, catchup_limit=500, now=T0).created:
        ticks += 1
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 3601  # 09:00:00 .. 10:00:00 inclusive
    assert ticks == 8


def test_disabled_and_paused_schedules_do_not_tick(conn: psycopg.Connection[Any]) -> None:
    text = '[[schedule]]\nname = "a"\nevery = "1m"\njob = "noop"\n[[schedule]]\nname = "b"\nevery = "1m"\njob = "noop"\n'
    apply_text(conn, text, now=T0)
    apply_text(conn, '[[schedule]]\nname = "a"\nevery = "1m"\njob = "noop"\n', prune=True, now=T0)
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'a'")
    assert run_once(conn, batch_size=10, catchup_limit=10, now=T0 + timedelta(minutes=5)).schedules == 0
    assert _runs(conn) == []


def test_ticker_uses_database_clock_for_due(conn: psycopg.Connection[Any]) -> None:
    # With no injected instant, due-ness is the database's now(): a schedule due an hour from the
    # database's point of view is not materialised, one due a minute ago is.
    db_now = scalar(conn, "SELECT now()")
    apply_text(
        conn,
        '[[schedule]]\nname = "future"\nevery = "1h"\njob = "noop"\n'
        f'start_at = "{(db_now + timedelta(hours=1)).isoformat()}"\n'
        '[[schedule]]\nname = "past"\nevery = "1h"\njob = "noop"\ncatchup = "all"\n'
        f'start_at = "{(db_now - timedelta(minutes=1)).isoformat()}"\n',
    )
    run_once(conn, batch_size=10, catchup_limit=10)
    names = [r["schedule_name"] for r in conn.execute("SELECT schedule_name FROM fleet.job_runs")]
    assert names == ["past"]


def test_a_start_at_far_in_the_past_under_all_creates_at_most_max_catchup_runs(
    conn: psycopg.Connection[Any],
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "typo"\nevery = "1s"\njob = "noop"\nstart_at = "2025-11-02T10:00:00Z"\n'
        'catchup = "all"\nmax_catchup = 50\n',
        now=T0,
    )
    for _ in range(5):  # however many ticks
        run_once(conn, batch_size=100, catchup_limit=1000, now=T0)
    assert 49 <= len(_runs(conn)) <= 51
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules") >= 10_000


def test_a_count_of_missed_slots_that_reached_its_limit_says_it_is_a_floor(
    conn: psycopg.Connection[Any], capfd: pytest.CaptureFixture[str]
) -> None:
    # A day of every second missed: the count stops at 10,000 and says so; an hour of every
    # minute is counted whole.
    for name, timing in (
        ("by-cron", 'cron = "* * * * * *"'),
        ("by-every", 'every = "1s"'),
        ("minutely", 'cron = "* * * * *"'),
    ):
        apply_text(
            conn,
            f'[[schedule]]\nname = "{name}"\n{timing}\njob = "noop"\n'
            'start_at = "2026-11-01T10:00:00Z"\ncatchup = "skip"\n',
            now=T0 - timedelta(days=1),
        )
    capfd.readouterr()
    run_once(conn, batch_size=100, catchup_limit=1000, now=T0)
    lines = [orjson.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    missed = {e["schedule"]: e for e in lines if e["event"] == "slots_missed"}
    assert missed["by-cron"]["count"] == 10_000 and missed["by-cron"]["at_least"] is True
    assert missed["by-every"]["count"] == 10_000 and missed["by-every"]["at_least"] is True
    assert missed["minutely"]["count"] == 1_440 and "at_least" not in missed["minutely"]
