"""Built-in retention: finished runs older than their schedule's retention (else the tickers'
default) go with their attempts, in small steps that any ticker continues, once per period."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

from fleet.observe import logs
from fleet.process.settings import ticker_settings
from fleet.store import chores
from fleet.store.chores import Chore, Progress, Step
from fleet.store.db import connect
from fleet.ticker.housekeeping import ticker_chores
from fleet.ticker.retention import RETENTION_CHORE, retention_chore, retention_step
from tests.support import apply_text, scalar

NOW = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
DAY = timedelta(days=1)
SCHEDULES = """
[[schedule]]
name = "default-kept"
every = "1h"
job = "noop"
start_at = "2099-01-01T00:00:00Z"

[[schedule]]
name = "short"
every = "1h"
job = "noop"
start_at = "2099-01-01T00:00:00Z"
retention = "2d"
"""


@pytest.fixture
def out() -> Iterator[io.BytesIO]:
    stream = io.BytesIO()
    logs.configure("json", stream=stream, process="ticker")
    yield stream
    logs.configure()


def passes(out: io.BytesIO) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line["event"] == "retention_pass"]


def add_run(
    conn: psycopg.Connection[Any],
    schedule: str,
    finished_ago: timedelta | None,
    status: str = "done",
    *,
    slot_ago: timedelta | None = None,
    origin: str = "schedule",
    outcome: str | None = None,
    attempts: int = 1,
) -> datetime:
    """A run of `schedule` that finished `finished_ago` before NOW (its slot a minute earlier, or
    `slot_ago`), with `attempts` attempt rows; returns its slot."""
    slot = NOW - (slot_ago if slot_ago is not None else (finished_ago or timedelta(0)) + timedelta(minutes=1))
    finished = NOW - finished_ago if finished_ago is not None else None
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, origin, attempts, run_after,"
        " finished_at, last_outcome) VALUES (%s, %s, 'noop', %s, %s, %s, %s, %s, %s)",
        (schedule, slot, status, origin, attempts, slot, finished, outcome),
    )
    for n in range(1, attempts + 1):
        conn.execute(
            "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at)"
            " VALUES (%s, %s, %s, 'w', %s)",
            (schedule, slot, n, slot),
        )
    return slot


def slots(conn: psycopg.Connection[Any], schedule: str) -> set[datetime]:
    rows = conn.execute(
        "SELECT scheduled_for FROM fleet.job_runs WHERE schedule_name = %s", (schedule,)
    ).fetchall()
    return {r["scheduled_for"] for r in rows}


def run_pass(conn: psycopg.Connection[Any], chore: Chore, now: datetime = NOW) -> int:
    """Steps of `chore` until its pass is over; returns how many steps it took."""
    chores.register(conn, [chore], now=now)
    steps = 0
    while chores.run_due(conn, [chore], now=now):
        steps += 1
        assert steps < 10_000
    return steps


def test_runs_older_than_their_retention_go_with_their_attempts(
    conn: psycopg.Connection[Any], out: io.BytesIO
) -> None:
    apply_text(conn, SCHEDULES)
    old = add_run(conn, "default-kept", 40 * DAY, attempts=3)
    young = add_run(conn, "default-kept", 20 * DAY, attempts=2)
    newest = add_run(conn, "default-kept", timedelta(hours=1))
    short_old = add_run(conn, "short", 3 * DAY)
    short_young = add_run(conn, "short", DAY)
    short_newest = add_run(conn, "short", timedelta(minutes=5))
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 9

    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 100))

    assert slots(conn, "default-kept") == {young, newest}
    assert slots(conn, "short") == {short_young, short_newest}  # its own 2 days, not the default 30
    assert old not in slots(conn, "default-kept") and short_old not in slots(conn, "short")
    # the removed runs' attempts are gone; the kept runs' stay
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 5
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE scheduled_for = %s", (old,)) == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE scheduled_for = %s", (young,)) == 2
    [line] = passes(out)
    assert line["runs"] == 2 and line["steps"] == 1 and line["default_retention_s"] == 30 * 86400


def test_only_finished_runs_go_never_dead_pending_or_running(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, SCHEDULES)
    dead = add_run(conn, "short", 10 * DAY, "dead")
    discarded = add_run(conn, "short", 10 * DAY - timedelta(hours=1), "skipped", outcome="discarded")
    skipped = add_run(conn, "short", 9 * DAY, "skipped")
    pending = add_run(conn, "short", None, "pending", slot_ago=8 * DAY)
    running = add_run(conn, "short", None, "running", slot_ago=7 * DAY)
    # a trigger's and a backfill's runs are history too; a backfill of an old slot that finished
    # lately is young: its age is its finish
    triggered = add_run(conn, "short", 6 * DAY, origin="trigger")
    backfilled = add_run(conn, "short", 5 * DAY, origin="backfill")
    late_backfill = add_run(conn, "short", timedelta(hours=2), origin="backfill", slot_ago=30 * DAY)
    newest = add_run(conn, "short", timedelta(hours=1))

    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 100))

    assert slots(conn, "short") == {dead, pending, running, late_backfill, newest}
    for gone in (discarded, skipped, triggered, backfilled):
        assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE scheduled_for = %s", (gone,)) == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE scheduled_for = %s", (dead,)) == 1


def test_a_schedules_newest_success_and_newest_finished_run_stay(conn: psycopg.Connection[Any]) -> None:
    """Status computes a schedule's health from them, however old they are."""
    apply_text(conn, SCHEDULES)
    add_run(conn, "short", 20 * DAY)
    last_success = add_run(conn, "short", 10 * DAY)
    add_run(conn, "short", 9 * DAY, "skipped")
    last_finished = add_run(conn, "short", 8 * DAY, "skipped")
    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 100))
    assert slots(conn, "short") == {last_success, last_finished}


def test_a_pass_goes_in_small_steps_and_once_per_period(
    conn: psycopg.Connection[Any], out: io.BytesIO
) -> None:
    apply_text(conn, SCHEDULES)
    for n in range(25):
        add_run(conn, "short", 3 * DAY + n * timedelta(minutes=5), attempts=0)
        add_run(conn, "default-kept", 31 * DAY + n * timedelta(minutes=5), attempts=0)
    add_run(conn, "short", timedelta(hours=1))
    add_run(conn, "default-kept", timedelta(hours=1))
    chore = retention_chore(timedelta(days=30), 600.0, 10)

    steps = run_pass(conn, chore)

    assert steps >= 5  # 50 runs, 10 a step
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 2
    [line] = passes(out)
    assert line["runs"] == 50 and line["steps"] == steps
    assert chores.run_due(conn, [chore], now=NOW + timedelta(seconds=599)) == []
    add_run(conn, "short", 4 * DAY)  # found by the next pass, not before
    assert chores.run_due(conn, [chore], now=NOW + timedelta(seconds=600)) == [RETENTION_CHORE]
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 2
    assert [p["runs"] for p in passes(out)] == [50, 1]


def test_a_step_walks_a_few_schedules_and_the_next_goes_on(conn: psycopg.Connection[Any]) -> None:
    """Many schedules with nothing to remove cost a short step each few of them, not one long one."""
    names = [f"s{n:02d}" for n in range(7)]
    apply_text(
        conn,
        "".join(f'[[schedule]]\nname = "{n}"\nevery = "1h"\njob = "noop"\nretention = "1d"\n' for n in names),
    )
    for n in names:
        add_run(conn, n, 5 * DAY, attempts=0)
        add_run(conn, n, timedelta(hours=1), attempts=0)
    seen: list[str | None] = []

    def step(c: psycopg.Connection[Any], p: Progress) -> Step:
        seen.append(p.cursor and orjson.loads(p.cursor)["schedule"])
        return retention_step(c, p, default=timedelta(days=30), batch=100, schedules_per_step=3)

    run_pass(conn, Chore(RETENTION_CHORE, 3600.0, step))
    assert seen == [None, "s02", "s05"]
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 7


def test_a_step_that_fails_removes_nothing_and_the_pass_goes_on(conn: psycopg.Connection[Any]) -> None:
    """A step that fails (or a ticker killed mid-step): its transaction rolls back, the stored
    position stays, and the next step (any ticker's, once the chore is due again) goes on from there."""
    apply_text(conn, SCHEDULES)
    for n in range(30):
        add_run(conn, "short", 3 * DAY + n * timedelta(minutes=5))
    add_run(conn, "short", timedelta(hours=1))
    good = retention_chore(timedelta(days=30), 3600.0, 10)
    chores.register(conn, [good], now=NOW)
    assert chores.run_due(conn, [good], now=NOW) == [RETENTION_CHORE]
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 21
    cursor = scalar(conn, "SELECT cursor FROM fleet.chores WHERE name = 'retention'")

    def dies(c: psycopg.Connection[Any], p: Progress) -> Step:
        good.step(c, p)
        raise RuntimeError("killed")

    assert chores.run_due(conn, [Chore(RETENTION_CHORE, 3600.0, dies)], now=NOW) == []  # logged
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 21  # nothing half-done
    assert scalar(conn, "SELECT cursor FROM fleet.chores WHERE name = 'retention'") == cursor
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 21
    run_pass(conn, good, NOW + timedelta(seconds=chores.RETRY_S))
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 1
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 1


def test_two_tickers_stepping_at_once_remove_each_run_once(
    conn: psycopg.Connection[Any], db_url: str, out: io.BytesIO
) -> None:
    names = [f"s{n}" for n in range(6)]
    apply_text(
        conn,
        "".join(f'[[schedule]]\nname = "{n}"\nevery = "1h"\njob = "noop"\nretention = "1d"\n' for n in names),
    )
    # 6 schedules x 200 old runs, slots before the database's now
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after,"
        " finished_at) SELECT s.name, now() - interval '10 days' - g * interval '1 minute', 'noop', 'done', 1,"
        " now() - interval '10 days', now() - interval '9 days' - g * interval '1 minute'"
        " FROM fleet.schedules s, generate_series(1, 200) g"
    )
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at)"
        " SELECT schedule_name, scheduled_for, 1, 'w', now() FROM fleet.job_runs"
    )
    chore = retention_chore(timedelta(days=30), 3600.0, 25)
    chores.register(conn, [chore])
    stepped: list[int] = [0, 0]
    failures: list[Exception] = []
    go = threading.Event()

    def ticker(i: int) -> None:
        try:
            with connect(db_url, f"ticker {i}") as c:
                go.wait(10)
                quiet = 0
                while quiet < 20:  # the pass is over when neither finds it due for a while
                    if chores.run_due(c, [chore]):
                        stepped[i] += 1
                        quiet = 0
                    else:
                        quiet += 1
                        threading.Event().wait(0.01)
        except Exception as e:  # noqa: BLE001 - reported by the test, in its own thread
            failures.append(e)

    threads = [threading.Thread(target=ticker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(60)
    assert not failures
    # each schedule keeps its newest run (its last success); every other one went once
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 6
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 6
    [line] = passes(out)  # one pass in the period, however many tickers stepped it
    assert line["runs"] == 6 * 199
    assert (
        line["steps"]
        == sum(stepped)
        == scalar(conn, "SELECT steps FROM fleet.chores WHERE name = 'retention'")
    )


def test_retention_off_leaves_history_alone() -> None:
    def names(argv: list[str], env: dict[str, str]) -> list[str]:
        return [c.name for c in ticker_chores(ticker_settings(argv, env))]

    assert RETENTION_CHORE in names([], {})
    assert RETENTION_CHORE not in names(["--retention", "off"], {})
    assert RETENTION_CHORE not in names([], {"FLEET_RETENTION": "off"})
