"""The slot ledger outlives retention: runs removed by the tickers' retention or `fleetctl prune`
leave each slot's outcome behind (fleet.slot_outcomes), so `verify` over an old window says what it
said before the runs went; the ledger's own retention, `--no-ledger` and FLEET_LEDGER_RETENTION=off
keep none; a slot run again by a backfill after its run went is told by its live run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.health.verify import verify
from fleet.ops.repair_commands import run_prune
from fleet.process.settings import ticker_settings
from fleet.ticker.housekeeping import ticker_chores
from fleet.ticker.retention import retention_chore
from tests.integration.ops_support import fleetctl
from tests.integration.test_retention import run_pass
from tests.integration.test_verify import counts, runs
from tests.support import apply_text, scalar

NOW = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
BASE = NOW - timedelta(days=60)  # the window's first slot: twice the default retention ago
MINUTE = timedelta(minutes=1)
SCHEDULE = '[[schedule]]\nname = "m"\nevery = "1m"\njob = "noop"\n'
Cap = pytest.CaptureFixture[str]


@pytest.fixture
def history(conn: psycopg.Connection[Any]) -> None:
    """Two hours of a one-minute schedule, 60 days ago, with every kind of outcome, and a recent
    run that retention keeps."""
    apply_text(conn, SCHEDULE)
    conn.execute("UPDATE fleet.schedules SET created_at = %s, next_run_at = %s", (BASE - MINUTE, NOW))
    runs(conn, "m", BASE, range(0, 100))
    runs(conn, "m", BASE, [100, 101], attempts=3)  # retried
    runs(conn, "m", BASE, [102], attempts=2)  # reclaimed: an attempt's lease ran out
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, outcome)"
        " VALUES ('m', %s, 1, 'w', %s, 'lease_expired')",
        (BASE + 102 * MINUTE, BASE),
    )
    runs(conn, "m", BASE, [103, 104], "skipped", attempts=0, error="catchup skip: not started within 30s")
    runs(conn, "m", BASE, [105], "skipped", attempts=0, error="overlap: an earlier run still in progress")
    runs(conn, "m", BASE, [106], "skipped", outcome="discarded")
    runs(conn, "m", BASE, [107], "done", origin="trigger", offset=timedelta(seconds=7))  # not at a slot
    runs(conn, "m", BASE, range(108, 120))
    # minutes 120 and 121 have no run: missing without a reason
    runs(conn, "m", NOW - timedelta(hours=1), [0])  # the newest run, which retention keeps


def old_runs(conn: psycopg.Connection[Any]) -> int:
    """Runs of the schedule older than a day: all but the newest, which retention keeps."""
    return int(
        scalar(
            conn, "SELECT count(*) FROM fleet.job_runs WHERE scheduled_for < %s", (NOW - timedelta(days=1),)
        )
    )


def ledger_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    (s,) = verify(conn, ["m"], BASE, BASE + 121 * MINUTE, now=NOW).schedules
    return s.counts


def test_retention_leaves_every_slots_outcome_in_the_ledger(
    conn: psycopg.Connection[Any], history: None
) -> None:
    before = ledger_counts(conn)
    # minutes 107 (its run is off the slot), 120 and 121 have none: older than the retention
    assert before == counts(once=112, retried=2, reclaimed=1, skipped=4, pruned=3)
    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 50), now=NOW)
    assert old_runs(conn) == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 0
    # three steps of 50 runs: three batches of outcomes, 120 runs (the one off its slot included)
    rows = conn.execute("SELECT slots FROM fleet.slot_outcomes ORDER BY first_slot").fetchall()
    assert [r["slots"] for r in rows] == [50, 50, 20]
    assert ledger_counts(conn) == before
    # the skipped ones keep their reasons
    (s,) = verify(conn, ["m"], BASE, BASE + 121 * MINUTE, now=NOW).schedules
    assert s.skipped == {
        "catchup": 2,
        "max_lateness": 0,
        "overlap": 1,
        "calendar": 0,
        "discarded": 1,
        "other": 0,
    }


def test_the_ledgers_own_retention_drops_old_outcomes(conn: psycopg.Connection[Any], history: None) -> None:
    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 1000), now=NOW)
    assert scalar(conn, "SELECT count(*) FROM fleet.slot_outcomes") == 1
    # a later pass, with a ledger kept 70 days: the outcomes (60 days old) stay
    later = NOW + timedelta(days=5)
    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 1000, ledger=timedelta(days=70)), now=later)
    assert scalar(conn, "SELECT count(*) FROM fleet.slot_outcomes") == 1
    # a ledger kept 50 days: they go, and verify tells those slots past retention again
    run_pass(
        conn,
        retention_chore(timedelta(days=30), 1.0, 1000, ledger=timedelta(days=50)),
        now=later + timedelta(hours=2),
    )
    assert scalar(conn, "SELECT count(*) FROM fleet.slot_outcomes") == 0
    assert ledger_counts(conn) == counts(pruned=122)


def test_a_ledger_turned_off_keeps_no_outcome(conn: psycopg.Connection[Any], history: None) -> None:
    settings = ticker_settings(["--ledger-retention", "off"], {})
    assert settings.ledger_retention is None
    (_, retention) = ticker_chores(settings)
    run_pass(conn, retention, now=NOW)
    assert old_runs(conn) == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.slot_outcomes") == 0
    assert ledger_counts(conn) == counts(pruned=122)


def test_bad_ledger_retention_is_refused_naming_the_flag() -> None:
    from fleet.errors import ConfigError

    for bad in ("5m", "4000d", "soon"):
        with pytest.raises(ConfigError, match="--ledger-retention"):
            ticker_settings(["--ledger-retention", bad], {})
    with pytest.raises(ConfigError, match="--ledger-retention"):
        ticker_settings([], {"FLEET_LEDGER_RETENTION": "0s"})
    assert ticker_settings([], {}).ledger_retention == timedelta(days=400)


def test_prune_keeps_the_outcomes_unless_told(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], history: None
) -> None:
    before = ledger_counts(conn)
    run_prune(conn, timedelta(days=7), schedule="m", batch=40, pause_s=0, now=NOW)
    assert ledger_counts(conn) == before
    assert scalar(conn, "SELECT sum(slots) FROM fleet.slot_outcomes") == 120
    conn.execute("DELETE FROM fleet.slot_outcomes")
    runs(conn, "m", BASE, [200, 201])
    code, out, _ = fleetctl(capsys, db_url, "prune", "--older-than", "7d", "--no-ledger")
    assert code == 0, out
    assert old_runs(conn) == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.slot_outcomes") == 0


def test_a_slot_run_again_after_its_run_went_is_told_by_its_live_run(
    conn: psycopg.Connection[Any], history: None
) -> None:
    run_pass(conn, retention_chore(timedelta(days=30), 3600.0, 1000), now=NOW)
    # minute 5 (ran once, removed) runs again by a backfill, and fails for good; minute 120
    # (never ran) gets a run now
    runs(conn, "m", BASE, [5], "dead", attempts=6, origin="backfill")
    runs(conn, "m", BASE, [120])
    assert ledger_counts(conn) == counts(once=112, retried=2, reclaimed=1, skipped=4, dead=1, pruned=2)
    # removed a second time, its new outcome stands beside the old one's batch
    conn.execute("UPDATE fleet.job_runs SET status = 'done' WHERE scheduled_for = %s", (BASE + 5 * MINUTE,))
    with conn.transaction():
        conn.execute(
            "DELETE FROM fleet.job_runs WHERE scheduled_for IN (%s, %s)",
            (BASE + 5 * MINUTE, BASE + 120 * MINUTE),
        )
    assert scalar(conn, "SELECT count(*) FROM fleet.slot_outcomes") == 2
    # minute 5's later outcome (done after 6 attempts: retried) is the one told
    assert ledger_counts(conn) == counts(once=112, retried=2, reclaimed=1, skipped=4, pruned=2) | {
        "once": 112,
        "retried": 3,
    }
