"""Every reader answers whatever a column holds: every time column of every table at the ends of
what the schema accepts (years 1 and 9999), alone and mixed, with the largest integers and odd text
where a process writes them. `fleetctl status` (text and JSON), `runs`, `show`, `dead`, `workers`,
the metrics and every dashboard page answer (exit 0 or 1, HTTP 200); none prints a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.ops.targets import iso
from tests.integration.ops_support import add_run
from tests.readers import dashboard_at, reader_failures
from tests.support import apply_text, live_ticker, scalar

LOW = datetime(1000, 1, 1, tzinfo=UTC)
HIGH = datetime(8999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
SCHEDULES = """
[[schedule]]
name = "s"
every = "1h"
job = "noop"
overlap = "skip"

[[schedule]]
name = "c"
cron = "0 2 * * *"
timezone = "Europe/Berlin"
job = "noop"
"""
SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)
# Time columns that are part of a key, or ordered among themselves: set apart, so that rows stay
# distinct and valid.
KEYS = {
    ("job_runs", "scheduled_for"),
    ("job_attempts", "scheduled_for"),
    ("slot_outcomes", "first_slot"),
    ("slot_outcomes", "last_slot"),
}
INT_MAX = 2**31 - 1


def time_columns(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """(table, column) of every time column of fleet's tables but the migrations' record."""
    return [
        (r["table_name"], r["column_name"])
        for r in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'fleet'"
            " AND data_type = 'timestamp with time zone' AND table_name <> 'migrations'"
            " ORDER BY table_name, column_name"
        )
    ]


@pytest.fixture
def fleet(db_url: str, conn: psycopg.Connection[Any]) -> None:
    """Two schedules, a run in every state with its attempts, stats, a gate, processes, chores."""
    apply_text(conn, SCHEDULES)
    live_ticker(conn)
    conn.execute(
        "INSERT INTO fleet.processes (id, kind, host, pid, jobs, running) VALUES ('w', 'worker', 'h', 1, '{noop}', 1)"
    )
    for i, status in enumerate(("pending", "running", "done", "dead", "skipped")):
        for name in ("s", "c"):
            add_run(conn, name, SLOT + timedelta(hours=i), status, attempts=2, error="boom")
    conn.execute(
        "UPDATE fleet.job_runs SET locked_by = 'w', locked_until = now() + interval '1 minute',"
        " trace_id = repeat('a', 32), span_id = repeat('b', 16), traced = true WHERE status = 'running'"
    )
    conn.execute("INSERT INTO fleet.schedule_gates VALUES ('s', %s)", (SLOT + timedelta(hours=1),))
    conn.execute(
        "INSERT INTO fleet.schedule_stats (name, last_success_slot, last_success_at, last_slot, last_status,"
        " last_finished_at) SELECT name, %s, now(), %s, 'dead', now() FROM fleet.schedules",
        (SLOT, SLOT),
    )
    conn.execute(
        "UPDATE fleet.schedules SET cadence_from = now(), cadence_mid = now(), cadence_until = now(),"
        " cadence_hash = timing_hash, cadence_gap = interval '1 day', paused_at = now(), broken_at = now(),"
        " broken_error = 'x' WHERE name = 'c'"
    )
    conn.execute(
        "INSERT INTO fleet.chores (name, due_at, mark, stepped_at) VALUES ('health_rollup', now(), now(), now())"
        " ON CONFLICT (name) DO UPDATE SET mark = now(), stepped_at = now()"
    )
    # A row in each of the other tables with instants: the slot ledger, the alerts, the audit.
    conn.execute(
        "INSERT INTO fleet.slot_outcomes (schedule_name, first_slot, last_slot, slots, records)"
        " VALUES ('s', %s, %s, 1, decode(repeat('00', 16), 'hex'))",
        (SLOT, SLOT),
    )
    conn.execute(
        "INSERT INTO fleet.alert_routes (name, kind, schedules, verdicts) VALUES ('r', 'webhook', '{*}', '{LATE}')"
    )
    conn.execute(
        "INSERT INTO fleet.alert_state (route, subject, verdict, opened_at, last_sent_at) VALUES ('r', 's', 'LATE', now(), now())"
    )
    conn.execute(
        "INSERT INTO fleet.alert_outbox (route, subject, verdict, event, payload, locked_until, sent_at)"
        " VALUES ('r', 's', 'LATE', 'alert', '{}', now(), now())"
    )
    conn.execute("INSERT INTO fleet.schedule_audit (action, schedule, note) VALUES ('pause', 's', 'odd')")
    # A run at each end of the time range, with its attempt.
    for slot in (LOW, HIGH):
        add_run(conn, "s", slot, "dead", attempts=1, finished="NULL", run_after=f"'{iso(slot)}'::timestamptz")


def set_times(conn: psycopg.Connection[Any], pick: Any) -> None:
    """Every time column that is not part of a key set to `pick(i)` (i: the column's place)."""
    for i, (table, column) in enumerate(time_columns(conn)):
        if (table, column) in KEYS:
            continue
        conn.execute(
            psycopg.sql.SQL("UPDATE fleet.{} SET {} = %s").format(
                psycopg.sql.Identifier(table), psycopg.sql.Identifier(column)
            ),
            (pick(i),),
        )


@pytest.fixture
def dashboard(db_url: str) -> Iterator[str]:
    with dashboard_at(db_url) as base:
        yield base


@pytest.mark.parametrize(
    "pick",
    [
        pytest.param(lambda i: LOW, id="all-year-1"),
        pytest.param(lambda i: HIGH, id="all-year-9999"),
        pytest.param(lambda i: (LOW, HIGH)[i % 2], id="mixed"),
        pytest.param(lambda i: (HIGH, LOW)[i % 2], id="mixed-inverse"),
    ],
)
def test_every_reader_answers_with_times_at_the_ends_of_the_range(
    fleet: None,
    db_url: str,
    conn: psycopg.Connection[Any],
    dashboard: str,
    capsys: pytest.CaptureFixture[str],
    pick: Any,
) -> None:
    set_times(conn, pick)
    assert (
        scalar(conn, "SELECT count(*) FROM fleet.schedules WHERE next_run_at IN (%s, %s)", (LOW, HIGH)) == 2
    )
    assert not (failed := reader_failures(db_url, dashboard, capsys)), failed


def test_every_reader_answers_with_the_largest_numbers_and_odd_text(
    fleet: None,
    db_url: str,
    conn: psycopg.Connection[Any],
    dashboard: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    odd = "\x1b[31m<b>\n" + "é" * 10_000
    conn.execute(
        "UPDATE fleet.job_runs SET attempts = %(max)s, failures = %(max)s, locked_pid = %(max)s,"
        " locked_by = %(odd)s, locked_host = %(odd)s, last_error = %(odd)s, last_outcome = %(odd)s,"
        " trace_id = %(odd)s, span_id = %(odd)s",
        {"max": INT_MAX, "odd": odd},
    )
    conn.execute(
        "UPDATE fleet.job_attempts SET attempt = %(max)s - attempt, pid = %(max)s, worker_id = %(odd)s,"
        " host = %(odd)s, outcome = %(odd)s, error = %(odd)s, trace_id = %(odd)s, span_id = %(odd)s",
        {"max": INT_MAX, "odd": odd},
    )
    conn.execute(
        "UPDATE fleet.schedules SET missed_slots = %s, broken_error = %s, cadence_hash = %s,"
        " cadence_gap = interval '146097 days'",
        (2**63 - 1, odd, odd),
    )
    conn.execute(
        "UPDATE fleet.schedule_stats SET last_outcome = %(odd)s, last_error = %(odd)s, dirty = %(max)s",
        {"max": INT_MAX, "odd": odd},
    )
    conn.execute(
        "UPDATE fleet.processes SET host = %(odd)s, pid = %(max)s, running = %(max)s, crashes = %(max)s,"
        " last_error = %(odd)s, jobs = ARRAY[%(odd)s]",
        {"max": INT_MAX, "odd": odd},
    )
    assert not (failed := reader_failures(db_url, dashboard, capsys)), failed


@pytest.mark.parametrize(
    "value",
    ["0999-12-31 23:59:59.999999+00", "9000-01-01 00:00+00", "infinity", "-infinity", "0001-01-01 00:00+00"],
)
def test_no_time_column_holds_an_instant_out_of_range(
    fleet: None, conn: psycopg.Connection[Any], value: str
) -> None:
    refused = []
    for table, column in time_columns(conn):
        statement = psycopg.sql.SQL("UPDATE fleet.{} SET {} = %s::timestamptz").format(
            psycopg.sql.Identifier(table), psycopg.sql.Identifier(column)
        )
        try:
            with conn.transaction():
                conn.execute(statement, (value,))
        except psycopg.errors.CheckViolation:
            refused.append((table, column))
    assert refused == [tc for tc in time_columns(conn)], value


def test_a_cadence_gap_is_positive_and_at_most_400_years(fleet: None, conn: psycopg.Connection[Any]) -> None:
    for gap in ("0 s", "-1 day", "146098 days", "1000 years"):
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute("UPDATE fleet.schedules SET cadence_gap = %s::interval", (gap,))
    conn.execute("UPDATE fleet.schedules SET cadence_gap = '146097 days'")
