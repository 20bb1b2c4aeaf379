"""No schedule can stop the fleet: the ticker's planning at the far ends of what apply accepts.

Each schedule here was accepted by apply and, before, stopped every ticker (an overflow), flooded the
table (a long grace, a cadence dense at other times of year) or never fired. Through the real tick:
none raises out of it, none creates more than its max_catchup, and a one-second schedule beside
them keeps getting its slots. What cannot be evaluated is marked broken, alone.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.errors import ScheduleFileError
from fleet.store.queries import q
from fleet.ticker.tick import RETRY_BROKEN, run_once
from tests.support import apply_text, scalar

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)

FAR_ENDS = """
[[schedule]]
name = "leap-day"
cron = "0 0 29 2 *"
catchup = "all"
start_at = "2001-01-01T00:00:00Z"
job = "noop"

[[schedule]]
name = "decade"
every = "3660d"
catchup = "all"
start_at = "1970-01-01T00:00:00Z"
job = "noop"

[[schedule]]
name = "long-grace"
every = "1s"
catchup = "skip"
grace = "3660d"
max_catchup = 500
start_at = "2020-01-01T00:00:00Z"
job = "noop"

[[schedule]]
name = "autumn"
cron = "* * * 9-10 *"
catchup = "all"
max_catchup = 2000
start_at = "1990-01-01T00:00:00Z"
job = "noop"

[[schedule]]
name = "monthly-all"
cron = "0 0 1 * *"
catchup = "all"
max_catchup = 100000
start_at = "1970-01-01T00:00:00Z"
job = "noop"

[[schedule]]
name = "second"
every = "1s"
job = "noop"
"""


def _counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute("SELECT schedule_name, count(*) AS n FROM fleet.job_runs GROUP BY 1").fetchall()
    return {r["schedule_name"]: r["n"] for r in rows}


def test_far_end_schedules_tick_bounded_beside_a_one_second_schedule(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, FAR_ENDS, now=NOW)
    caps = {"leap-day": 1000, "decade": 1000, "autumn": 2000, "monthly-all": 100000}
    second_slots = []
    for step in range(40):  # 40 ticks, one a second of database time
        now = NOW + timedelta(seconds=step)
        started = time.monotonic()
        result = run_once(conn, batch_size=100, catchup_limit=1000, now=now)
        assert time.monotonic() - started < 5, "one tick took seconds"
        assert result.broken == 0
        second_slots.append(
            scalar(conn, "SELECT max(scheduled_for) FROM fleet.job_runs WHERE schedule_name = 'second'")
        )
    # the one-second schedule got every slot of its 40 seconds
    assert second_slots[-1] == NOW + timedelta(seconds=39)
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE schedule_name = 'second'") == 40
    counts = _counts(conn)
    for name, cap in caps.items():
        assert counts.get(name, 0) <= cap, (name, counts.get(name))
    # the long grace is bounded by max_catchup; counted in slots, `* * * 9-10 *` makes exactly its cap
    assert counts["long-grace"] <= 500 + 40
    assert counts["autumn"] == 2000
    assert counts["leap-day"] == 6  # 2004 .. 2024
    assert counts["monthly-all"] == (2026 - 1970) * 12 + 12
    # the newest slots are the ones kept
    newest_autumn = scalar(
        conn, "SELECT max(scheduled_for) FROM fleet.job_runs WHERE schedule_name = 'autumn'"
    )
    assert newest_autumn == datetime(2026, 10, 31, 23, 59, tzinfo=UTC)
    missed = scalar(conn, "SELECT missed_slots FROM fleet.schedules WHERE name = 'autumn'")
    assert missed > 0


def test_a_schedule_that_cannot_be_evaluated_is_marked_broken_and_alone(
    conn: psycopg.Connection[Any],
) -> None:
    apply_text(conn, '[[schedule]]\nname = "second"\nevery = "1s"\njob = "noop"\n', now=NOW)
    apply_text(
        conn,
        '[[schedule]]\nname = "second"\nevery = "1s"\njob = "noop"\n'
        '[[schedule]]\nname = "gap"\ncron = "30 2 * * *"\ntimezone = "America/New_York"\njob = "noop"\n',
        now=NOW,
    )
    # What an earlier version stored, or a zone's rules changed under it: a cron whose every time
    # now falls in a daylight-saving gap (the second Sunday of March at 02:30, New York).
    conn.execute(
        "UPDATE fleet.schedules SET cron = '30 2 * 3 0#2', dst_missing = 'skip', next_run_at = %s"
        " WHERE name = 'gap'",
        (NOW,),
    )
    started = time.monotonic()
    result = run_once(conn, batch_size=100, catchup_limit=1000, now=NOW)
    assert time.monotonic() - started < 2
    assert result.broken == 1 and result.created >= 1
    row = conn.execute(
        "SELECT broken_at, broken_error, next_run_at FROM fleet.schedules WHERE name = 'gap'"
    ).fetchone()
    assert row is not None and row["broken_at"] == NOW and row["next_run_at"] == NOW
    assert row["broken_error"].startswith("cron: ") and "\n" not in row["broken_error"]
    # the ticker's sleep is not cut short by the broken schedule's next slot, still in the past
    wait = scalar(conn, "SELECT min(next_run_at) FROM fleet.schedules WHERE broken_at IS NULL")
    assert wait > NOW
    row = conn.execute(
        q("schedule_next_wait"), {"now": NOW, "lookahead": timedelta(0), "margin": timedelta(0)}
    ).fetchone()
    assert row is not None and row["wait_s"] > 0
    # skipped while broken, the others go on
    later = NOW + timedelta(seconds=5)
    assert run_once(conn, batch_size=100, catchup_limit=1000, now=later).broken == 0
    assert (
        scalar(conn, "SELECT max(scheduled_for) FROM fleet.job_runs WHERE schedule_name = 'second'") == later
    )
    # tried again later: a fixed definition advances and loses the mark
    conn.execute("UPDATE fleet.schedules SET cron = '30 2 * * *', dst_missing = 'shift' WHERE name = 'gap'")
    again = NOW + RETRY_BROKEN + timedelta(seconds=1)
    assert run_once(conn, batch_size=100, catchup_limit=1000, now=again).broken == 0
    row = conn.execute(
        "SELECT broken_at, broken_error, next_run_at FROM fleet.schedules WHERE name = 'gap'"
    ).fetchone()
    assert row is not None and row["broken_at"] is None and row["broken_error"] is None
    assert row["next_run_at"] > again


def test_apply_clears_the_broken_mark_of_a_schedule_it_changes(conn: psycopg.Connection[Any]) -> None:
    text = '[[schedule]]\nname = "s"\nevery = "1m"\njob = "noop"\n'
    apply_text(conn, text, now=NOW)
    conn.execute("UPDATE fleet.schedules SET broken_at = now(), broken_error = 'every: x'")
    apply_text(conn, text.replace('"1m"', '"2m"'), now=NOW)
    assert scalar(conn, "SELECT broken_at FROM fleet.schedules") is None


@pytest.mark.parametrize(
    ("cron", "timezone"),
    [
        ("30 2 * 3 0#2", "America/New_York"),  # the second Sunday of March, 02:30: always in the gap
        ("* * 2 * 3 0#2", "America/New_York"),  # every second of that 02:00-03:00 hour
    ],
)
def test_apply_refuses_a_cron_that_never_fires_in_ten_years(
    conn: psycopg.Connection[Any], cron: str, timezone: str
) -> None:
    text = (
        f'[[schedule]]\nname = "gap"\ncron = "{cron}"\ntimezone = "{timezone}"\ndst_missing = "skip"\njob = "noop"\n'
        '[[schedule]]\nname = "fine"\nevery = "1m"\njob = "noop"\n'
    )
    started = time.monotonic()
    with pytest.raises(ScheduleFileError) as e:
        apply_text(conn, text, now=NOW)
    assert time.monotonic() - started < 2
    if cron.startswith("30"):
        assert e.value.problems == [
            "schedule 'gap': cron: never fires in the 10 years from 2026-12-04"
            " (cron 30 2 * 3 0#2 (America/New_York, missing times: skip)): its next 200 times from"
            " 2026-12-04T11:59:59.999999Z all fall in daylight-saving gaps of America/New_York"
        ]
    else:
        assert len(e.value.problems) == 1
        assert e.value.problems[0].startswith(
            "schedule 'gap': cron: never fires in the 10 years from 2026-12-04"
        )
    assert scalar(conn, "SELECT count(*) FROM fleet.schedules") == 0  # all or nothing


def test_a_start_at_far_ahead_is_measured_from_its_start(conn: psycopg.Connection[Any]) -> None:
    # a leap day every 4 years, from a start 900 years ahead: it fires within 10 years of its start
    apply_text(
        conn,
        '[[schedule]]\nname = "later"\ncron = "0 0 29 2 *"\nstart_at = "2999-06-01T00:00:00Z"\njob = "noop"\n',
        now=NOW,
    )
    assert scalar(conn, "SELECT next_run_at FROM fleet.schedules") == datetime(
        3004, 2, 29, tzinfo=UTC
    )  # 3000 is no leap year


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE fleet.schedules SET next_run_at = 'infinity'",
        "UPDATE fleet.schedules SET paused_at = '-infinity'",
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after)"
        " VALUES ('s', 'infinity', 'noop', now())",
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after)"
        " VALUES ('s', now(), 'noop', '-infinity')",
    ],
)
def test_no_run_or_schedule_can_hold_an_infinite_time(conn: psycopg.Connection[Any], sql: str) -> None:
    # A claim could not decode such a run (and would fail at every round), a reader such a schedule.
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1m"\njob = "noop"\n', now=NOW)
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(sql)
