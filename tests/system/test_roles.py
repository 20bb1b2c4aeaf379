"""Least privilege: a ticker, a worker and fleetctl run as login roles granted fleet_ticker,
fleet_worker, fleet_operator and fleet_reader do their work; each role is refused what it must not
do; a permission error is one line and exit 2, naming the role and what to grant. The row rules: a
worker's or a ticker's login changes runs and schedules only as its process does (a dead run stays
dead, a lease or retry is not pushed out, attempts are not forged, a next slot only moves forward
within its timing), and every reader answers with whatever those logins may still write."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.ops.cli import main as fleetctl
from fleet.store.db import connect
from fleet.worker.attempt import Outcome
from fleet.worker.claim import run_claim
from fleet.worker.finish import DONE as SUCCESS
from fleet.worker.finish import handed_back, run_finish
from fleet.worker.heartbeat import run_heartbeat
from fleet.worker.previous import look_up
from tests.readers import dashboard_at, reader_failures
from tests.support import (
    FAST,
    Proc,
    env_for,
    fleetctl_cmd,
    login_roles,
    processes,
    scalar,
    ticker_cmd,
    wait_for,
    worker_cmd,
)

KINDS = ("ticker", "worker", "operator", "reader")
SCHEDULES = """
[[schedule]]
name = "gated"
every = "1s"
job = "noop"
overlap = "skip"
catchup = "skip"
"""


@pytest.fixture
def role_urls(db_url: str, server_url: str) -> Iterator[dict[str, str]]:
    """A login role per fleet role (unique to this test), and a URL for each."""
    assert fleetctl(["--database-url", db_url, "migrate", "--roles"]) == 0
    with login_roles(server_url, db_url, KINDS, "t") as urls:
        yield urls


def denied(url: str, sql: str) -> str:
    """The error the database gives the role of `url` for `sql` (the test fails if it is allowed)."""
    with connect(url, "fleet-tests denied") as c, pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        c.execute(sql)
    return str(e.value)


def test_each_role_does_its_work_and_nothing_more(
    role_urls: dict[str, str], conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    sched = tmp_path / "s.toml"
    sched.write_text(SCHEDULES)
    assert fleetctl(["--database-url", role_urls["operator"], "apply", str(sched)]) == 0
    # History for the ticker's retention: an old done run with its attempt goes, an old dead one stays.
    for kind, slot in (("done", "2000-01-01T00:00Z"), ("dead", "2000-01-02T00:00Z")):
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after,"
            " finished_at) VALUES ('gated', %s, 'noop', %s, 1, %s, %s)",
            (slot, kind, slot, slot),
        )
        conn.execute(
            "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at)"
            " VALUES ('gated', %s, 1, 'w', %s)",
            (slot, slot),
        )
    # Done runs 40 days old: retention removes them (but the newest, while no newer one is done),
    # and their outcomes stay in the slot ledger.
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after,"
        " finished_at) SELECT 'gated', t, 'noop', 'done', 1, t, t"
        " FROM (SELECT date_trunc('second', now()) - interval '40 days' - m * interval '1 minute' AS t"
        " FROM generate_series(0, 1) m) x"
    )
    # A run created ahead of its time that nobody started within its grace: the ticker role settles
    # it by the schedule's catch-up policy (skip).
    stale = "now() - interval '1 hour'"
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after, start_by)"
        f" VALUES ('gated', {stale}, 'noop', 'skip', {stale}, {stale} + interval '1 s')"
    )
    with processes() as procs:
        ticker_flags = ("--poll", "0.5", "--retention-every", "1")
        procs.append(Proc(ticker_cmd(*ticker_flags), env_for(role_urls["ticker"]), tmp_path / "ticker.log"))
        for i in range(2):
            procs.append(
                Proc(
                    worker_cmd("--app", "fleet_test_jobs", "--id", f"w{i}", *FAST),
                    env_for(role_urls["worker"], FLEET_TEST_DIR=str(tmp_path)),
                    tmp_path / f"worker{i}.log",
                )
            )
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") >= 3,
            timeout=30,
            what="three runs done by the ticker and worker roles",
        )
        wait_for(
            lambda: (
                scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE scheduled_for < '2001-01-01'") == 1
            ),
            timeout=30,
            what="the old done run removed by the ticker role's retention",
        )
        wait_for(
            lambda: scalar(
                conn, "SELECT count(*) FROM fleet.slot_outcomes WHERE last_slot > now() - interval '41 days'"
            ),
            timeout=30,
            what="the outcome of a 40-day-old run kept in the slot ledger",
        )
        wait_for(
            lambda: (
                scalar(conn, "SELECT count(*) FROM fleet.schedule_stats WHERE last_success_at IS NOT NULL")
                >= 1
            ),
            timeout=30,
            what="the ticker role's health roll-up",
        )
        wait_for(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(*) FROM fleet.job_runs WHERE status = 'skipped' AND start_by IS NULL"
                    " AND last_error LIKE 'catchup skip: not started within its grace (1s)%'",
                )
                == 1
            ),
            timeout=30,
            what="the stale run settled by the ticker role",
        )
        for p in procs:
            assert p.popen.poll() is None, p.output()
    status = subprocess.run(
        fleetctl_cmd("status", "--json"),
        env=env_for(role_urls["reader"]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode in (0, 1) and '"gated"' in status.stdout, status.stderr

    slot = "(SELECT max(scheduled_for) FROM fleet.job_runs)"
    # A worker cannot change a schedule's definition, nor hold its gate for a slot without an open run.
    worker = role_urls["worker"]
    assert "permission denied" in denied(worker, "UPDATE fleet.schedules SET job = 'evil'")
    for take in (
        "INSERT INTO fleet.schedule_gates VALUES ('gated', '2000-01-01T00:00Z')",
        "INSERT INTO fleet.schedule_gates VALUES ('gated', '2000-01-01T00:00Z')"
        " ON CONFLICT (name) DO UPDATE SET running_slot = excluded.running_slot",
    ):
        assert "row-level security" in denied(worker, take)
    assert "permission denied" in denied(worker, "DELETE FROM fleet.schedule_gates")
    assert "permission denied" in denied(
        worker, f"UPDATE fleet.job_runs SET args = '{{}}' WHERE scheduled_for = {slot}"
    )
    assert "permission denied" in denied(worker, "DELETE FROM fleet.job_runs")
    # A ticker cannot finish runs, nor change one it did not create ahead, nor create one with a job
    # or args of its choosing.
    ticker = role_urls["ticker"]
    assert "permission denied" in denied(
        ticker, f"UPDATE fleet.job_runs SET job = 'evil' WHERE scheduled_for = {slot}"
    )
    with connect(ticker, "fleet-tests ticker") as c:
        assert c.execute("UPDATE fleet.job_runs SET status = 'skipped' WHERE start_by IS NULL").rowcount == 0
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after, start_by)"
        " VALUES ('gated', '2999-01-01T00:00Z', 'noop', 'skip', '2999-01-01T00:00Z', '2999-01-01T00:01Z')"
    )
    ahead = "scheduled_for = '2999-01-01T00:00Z'"
    for change in (
        "status = 'done', start_by = NULL",
        "status = 'running', start_by = NULL",
        "start_by = now()",
    ):
        assert "row-level security" in denied(ticker, f"UPDATE fleet.job_runs SET {change} WHERE {ahead}")
    conn.execute(f"DELETE FROM fleet.job_runs WHERE {ahead}")
    assert "row-level security" in denied(
        ticker,
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, run_after) "
        "VALUES ('gated', '2001-01-01T00:00Z', 'evil', '{}', now())",
    )
    assert "row-level security" in denied(
        ticker,
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, run_after) "
        "VALUES ('gated', '2001-01-01T00:00Z', 'noop', '{\"cmd\": \"rm\"}', now())",
    )
    assert "permission denied" in denied(ticker, "UPDATE fleet.schedules SET args = '{}'")
    # Nor a slot before the schedule's next one (created once already), nor beyond the lookahead.
    for slot in ("'2000-01-01T00:00Z'", "now() + interval '8 days'"):
        assert "row-level security" in denied(
            ticker,
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
            f"VALUES ('gated', {slot}, 'noop', 'skip', {slot})",
        )
    # Its retention removed the old done run with its attempt (through the trigger), not the dead
    # one; it cannot delete a dead, pending or running run, nor an attempt by itself.
    old = conn.execute(
        "SELECT r.status::text AS status, count(a.*) AS attempts FROM fleet.job_runs r"
        " LEFT JOIN fleet.job_attempts a USING (schedule_name, scheduled_for)"
        " WHERE r.scheduled_for < '2001-01-01' GROUP BY r.status"
    ).fetchall()
    assert old == [{"status": "dead", "attempts": 1}]
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE scheduled_for < '2001-01-01'") == 1
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, run_after)"
        " VALUES ('gated', '2000-01-03T00:00Z', 'noop', 'pending', '2999-01-01T00:00Z')"
    )
    with connect(ticker, "fleet-tests ticker") as c:
        gone = c.execute("DELETE FROM fleet.job_runs WHERE status IN ('dead', 'pending', 'running')")
        assert gone.rowcount == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE scheduled_for < '2001-01-01'") == 2
    assert "permission denied" in denied(ticker, "DELETE FROM fleet.job_attempts")
    # The removed run left its outcome in the slot ledger, written by the trigger from the row
    # itself: no role may write an outcome of its own.
    forged = (
        "INSERT INTO fleet.slot_outcomes (schedule_name, first_slot, last_slot, slots, records)"
        " VALUES ('gated', '2000-01-05T00:00Z', '2000-01-05T00:00Z', 1, decode(repeat('00', 16), 'hex'))"
    )
    for role in ("ticker", "worker", "operator", "reader"):
        assert "permission denied" in denied(role_urls[role], forged), role
    # A reader reads; an operator changes schedules and runs, never the schema.
    assert "permission denied" in denied(role_urls["reader"], "DELETE FROM fleet.job_runs")
    assert "must be owner" in denied(role_urls["operator"], "DROP TABLE fleet.job_runs")
    assert "permission denied" in denied(role_urls["operator"], "CREATE TABLE fleet.mine (x int)")
    # An operator's retry marks the schedule's health stats for a fresh look.
    retry = ["--database-url", role_urls["operator"], "retry", "gated", "2000-01-02T00:00Z"]
    assert fleetctl(retry) == 0
    assert scalar(conn, "SELECT dirty FROM fleet.schedule_stats WHERE name = 'gated'") >= 1


def test_a_permission_error_is_one_line_and_exit_2(
    role_urls: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sched = tmp_path / "s.toml"
    sched.write_text(SCHEDULES)
    assert fleetctl(["--database-url", role_urls["reader"], "apply", str(sched)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    reader = f"t_reader_{os.getpid()}"
    assert (
        len(err) == 1 and reader in err[0] and "permission denied" in err[0] and "fleet_operator" in err[0]
    ), err
    # A ticker started with a reader's rights says so once and exits 2, instead of retrying forever.
    ticker = subprocess.run(
        ticker_cmd("--poll", "0.5"), env=env_for(role_urls["reader"], FLEET_LOG_FORMAT="json"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ticker.returncode == 2, ticker.stderr + ticker.stdout
    lines = [x for x in (ticker.stdout + ticker.stderr).splitlines() if "permission_denied" in x]
    assert len(lines) == 1 and reader in lines[0] and "fleet_ticker" in lines[0], lines


ROW_RULES_SCHEDULES = """
[[schedule]]
name = "hourly"
every = "1h"
job = "noop"
overlap = "skip"
retry = { max_attempts = 5, base = "30s", cap = "15m" }

[[schedule]]
name = "weekdays"
cron = "0 9 * * MON-FRI"
timezone = "Europe/Berlin"
job = "noop"
"""
DEAD = "2026-01-01T00:00Z"
DONE = "2026-01-01T01:00Z"
RUNNING = "2026-01-01T02:00Z"
DUE = "2026-01-01T03:00Z"
AHEAD = "2999-01-01T00:00Z"
FRESH = "2026-01-01T04:00Z"
EXPIRED = "2026-01-01T05:00Z"


def allowed(url: str, sql: str) -> int:
    """The rows `sql` changed, run as the role of `url`."""
    with connect(url, "fleet-tests allowed") as c:
        return c.execute(sql).rowcount


@pytest.fixture
def rows(role_urls: dict[str, str], conn: psycopg.Connection[Any], tmp_path: Path) -> dict[str, str]:
    """Two schedules (one interval, one cron) and a run of `hourly` in each state: dead, done,
    running (attempt 2 held by w1), pending and due, pending ahead of its time."""
    sched = tmp_path / "s.toml"
    sched.write_text(ROW_RULES_SCHEDULES)
    assert fleetctl(["--database-url", role_urls["operator"], "apply", str(sched)]) == 0
    for slot, status, attempts in (
        (DEAD, "dead", 3),
        (DONE, "done", 1),
        (RUNNING, "running", 2),
        (DUE, "pending", 0),
    ):
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, status, attempts, run_after,"
            " finished_at, locked_by, locked_until, started_at) VALUES ('hourly', %s, 'noop', 'skip', %s, %s, %s,"
            " CASE WHEN %s IN ('done', 'dead') THEN now() END, CASE WHEN %s = 'running' THEN 'w1' END,"
            " CASE WHEN %s = 'running' THEN now() + interval '1 minute' END, CASE WHEN %s > 0 THEN now() END)",
            (slot, status, attempts, slot, status, status, status, attempts),
        )
        for attempt in range(1, attempts + (status != "running")):
            conn.execute(
                "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at,"
                " finished_at, outcome) VALUES ('hourly', %s, %s, 'w1', now(), now(), 'failed')",
                (slot, attempt),
            )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after)"
        " VALUES ('hourly', %s, 'noop', 'skip', %s)",
        (AHEAD, AHEAD),
    )
    conn.execute("UPDATE fleet.schedules SET missed_slots = 5")
    return role_urls


def run(slot: str) -> str:
    """The SQL condition naming the run of `hourly` at `slot`."""
    return f"schedule_name = 'hourly' AND scheduled_for = '{slot}'"


def test_a_worker_role_changes_runs_only_as_its_own_statements_do(
    rows: dict[str, str], conn: psycopg.Connection[Any]
) -> None:
    worker = rows["worker"]
    refused = {
        # a dead run hidden as done, or any finished run changed
        f"UPDATE fleet.job_runs SET status = 'done', finished_at = now(), last_error = NULL WHERE {run(DEAD)}",
        f"UPDATE fleet.job_runs SET status = 'pending', run_after = now() WHERE {run(DEAD)}",
        f"UPDATE fleet.job_runs SET status = 'running', attempts = attempts + 1, locked_by = 'x',"
        f" locked_until = now() + interval '1 minute' WHERE {run(DONE)}",
        # a run held for ever, or pushed a century out
        f"UPDATE fleet.job_runs SET locked_until = now() + interval '100 years' WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET locked_until = now() + interval '8 days' WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET status = 'pending', locked_by = NULL, locked_until = NULL,"
        f" run_after = now() + interval '100 years' WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET run_after = now() + interval '100 years' WHERE {run(DUE)}",
        # the fencing token forged, or a run finished as another attempt
        f"UPDATE fleet.job_runs SET attempts = attempts + 5 WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET status = 'done', attempts = 1, locked_by = NULL, locked_until = NULL,"
        f" finished_at = now() WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET failures = failures + 1 WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET renewed_at = '8999-01-01T00:00Z' WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET renewed_at = '1000-01-01T00:00Z' WHERE {run(RUNNING)}",
        # a lease still held taken over, a run claimed before its time, a pending run done unclaimed
        f"UPDATE fleet.job_runs SET attempts = attempts + 1, locked_by = 'x', locked_until = now()"
        f" + interval '1 minute' WHERE {run(RUNNING)}",
        f"UPDATE fleet.job_runs SET status = 'running', attempts = 1, locked_by = 'x', started_at = now(),"
        f" locked_until = now() + interval '1 minute' WHERE {run(AHEAD)}",
        f"UPDATE fleet.job_runs SET status = 'done', finished_at = now() WHERE {run(DUE)}",
        # attempts forged: another attempt of a run, or a run that does not exist
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, outcome)"
        f" VALUES ('hourly', '{DEAD}', 7, 'x', now(), 'done')",
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, outcome)"
        " VALUES ('hourly', '2000-01-01T00:00Z', 1, 'x', now(), 'done')",
        # a ticker forged in the process registry
        "INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('fake', 'ticker', 'h', 1)",
    }
    for sql in refused:
        error = denied(worker, sql)
        assert "permission denied" in error or "row-level security" in error, sql
    # Nothing changed, and the registry's other kind is out of reach (no row matches).
    conn.execute("INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('t', 'ticker', 'h', 1)")
    assert allowed(worker, "DELETE FROM fleet.processes WHERE kind = 'ticker'") == 0
    assert allowed(worker, "UPDATE fleet.processes SET seen_at = now()") == 0
    assert conn.execute(
        "SELECT status::text, attempts FROM fleet.job_runs WHERE schedule_name = 'hourly' ORDER BY scheduled_for"
    ).fetchall() == [
        {"status": "dead", "attempts": 3},
        {"status": "done", "attempts": 1},
        {"status": "running", "attempts": 2},
        {"status": "pending", "attempts": 0},
        {"status": "pending", "attempts": 0},
    ]
    # Its own changes pass: a heartbeat, a retry within the cap with its attempt's history, a
    # claim of the due run and its finish.
    renew = f"UPDATE fleet.job_runs SET locked_until = now() + interval '7 days' WHERE {run(RUNNING)} AND locked_by = 'w1'"
    assert allowed(worker, renew) == 1
    assert (
        allowed(
            worker,
            "WITH f AS (UPDATE fleet.job_runs SET status = 'pending', locked_by = NULL, locked_until = NULL,"
            " failures = failures + 1, run_after = now() + interval '15 minutes'"
            f" WHERE {run(RUNNING)} AND attempts = 2 RETURNING *)"
            " INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, outcome)"
            " SELECT schedule_name, scheduled_for, attempts, 'w1', started_at, 'failed' FROM f",
        )
        == 1
    )
    assert (
        allowed(
            worker,
            "UPDATE fleet.job_runs SET status = 'running', attempts = attempts + 1, locked_by = 'w2',"
            f" locked_until = now() + interval '1 minute', started_at = now() WHERE {run(DUE)}",
        )
        == 1
    )
    assert (
        allowed(
            worker,
            "UPDATE fleet.job_runs SET status = 'done', locked_by = NULL, locked_until = NULL, finished_at = now()"
            f" WHERE {run(DUE)}",
        )
        == 1
    )
    assert (
        allowed(worker, "INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('w9', 'worker', 'h', 1)")
        == 1
    )
    # The worker's own statements pass as the role: a claim that takes a due run and reclaims one
    # whose lease ran out (recording the lost attempt), a heartbeat, a finish of one done and one
    # retried later than a day (within the schedule's retry cap of 30 days), then a hand-back.
    conn.execute("UPDATE fleet.schedules SET retry_cap = interval '30 days' WHERE name = 'hourly'")
    for slot, status, until in ((FRESH, "pending", None), (EXPIRED, "running", "now() - interval '1 s'")):
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, status, attempts, run_after,"
            f" locked_by, locked_until, started_at) VALUES ('hourly', %s, 'noop', 'allow', %s, %s, now(),"
            f" 'gone', {until or 'NULL'}, now())",
            (slot, status, 1 if until else 0),
        )
    with connect(worker, "fleet-tests worker statements") as c:
        claimed, _ = run_claim(c, worker_id="w3", jobs=["noop"], limit=10, lease_s=60)
        assert sorted((a.slot.isoformat(), a.attempt) for a in claimed) == [
            ("2026-01-01T04:00:00+00:00", 1),
            ("2026-01-01T05:00:00+00:00", 2),
        ]
        assert len(run_heartbeat(c, claimed, 60, "w3")) == 2
        fresh, expired = sorted(claimed, key=lambda a: a.slot)
        # a handler's first read of its window keeps the previous success with the run
        assert look_up(c, fresh, "w3")["previous_slot"] == "2026-01-01T03:00:00+00:00"
        kept = conn.execute(
            f"SELECT run_window->>'previous_slot' AS p FROM fleet.job_runs WHERE {run(FRESH)}"
        )
        assert kept.fetchone() == {"p": "2026-01-01T03:00:00+00:00"}
        later = Outcome("pending", "failed", "boom", delay_s=20 * 86400, spent=1)
        assert len(run_finish(c, [(fresh, SUCCESS), (expired, later)], worker_id="w3")) == 2
        again, _ = run_claim(c, worker_id="w3", jobs=["noop"], limit=10, lease_s=60)
        assert again == []
    conn.execute(f"UPDATE fleet.job_runs SET run_after = now() WHERE {run(EXPIRED)}")
    with connect(worker, "fleet-tests worker statements") as c:
        (retaken,), _ = run_claim(c, worker_id="w3", jobs=["noop"], limit=10, lease_s=60)
        assert retaken.attempt == 3
        assert len(run_finish(c, [(retaken, handed_back())], worker_id="w3")) == 1
        (retaken,), _ = run_claim(c, worker_id="w3", jobs=["noop"], limit=10, lease_s=60)
        too_late = Outcome("pending", "failed", "boom", delay_s=40 * 86400, spent=1)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="rule: finish"):
            run_finish(c, [(retaken, too_late)], worker_id="w3")
    history = conn.execute(
        f"SELECT attempt, worker_id, outcome FROM fleet.job_attempts WHERE {run(EXPIRED)} ORDER BY attempt"
    ).fetchall()
    assert history == [
        {"attempt": 1, "worker_id": "gone", "outcome": "lease_expired"},
        {"attempt": 2, "worker_id": "w3", "outcome": "failed"},
        {"attempt": 3, "worker_id": "w3", "outcome": "handed_back"},
    ]


def test_a_ticker_role_only_moves_a_next_slot_forward_within_its_timing(
    rows: dict[str, str], conn: psycopg.Connection[Any]
) -> None:
    ticker = rows["ticker"]
    refused = [
        "UPDATE fleet.schedules SET next_run_at = NULL",
        "UPDATE fleet.schedules SET next_run_at = '8999-01-01T00:00Z'",
        "UPDATE fleet.schedules SET next_run_at = now() + interval '100 years' WHERE name = 'weekdays'",
        "UPDATE fleet.schedules SET next_run_at = now() + interval '9 days' WHERE name = 'hourly'",
        "UPDATE fleet.schedules SET next_run_at = now() + interval '16 days' WHERE name = 'weekdays'",
        "UPDATE fleet.schedules SET next_run_at = next_run_at - interval '1 hour'",
        "UPDATE fleet.schedules SET missed_slots = 0",
        "UPDATE fleet.schedules SET broken_at = now() + interval '1 day', broken_error = 'x'",
        "UPDATE fleet.schedules SET cadence_gap = interval '100 years' WHERE name = 'weekdays'",
        "UPDATE fleet.schedules SET cadence_from = now(), cadence_mid = now() + interval '1 day',"
        " cadence_until = now() + interval '1 year' WHERE name = 'weekdays'",
        "INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('fake', 'worker', 'h', 1)",
    ]
    for sql in refused:
        error = denied(ticker, sql)
        assert "permission denied" in error or "row-level security" in error, sql
    # Out of every reader's range, for every role: refused by the schema itself.
    for value in ("infinity", "9000-01-01T00:00Z"):
        with connect(ticker, "fleet-tests ticker") as c, pytest.raises(psycopg.errors.CheckViolation):
            c.execute("UPDATE fleet.schedules SET next_run_at = %s::timestamptz", (value,))
    assert (
        scalar(conn, "SELECT count(*) FROM fleet.schedules WHERE next_run_at IS NULL OR missed_slots <> 5")
        == 0
    )
    # What a tick does passes: the next slot to the one after now (the lookahead's bound included),
    # missed slots counted, a broken mark set and cleared, cadence windows of the timing's gaps.
    assert allowed(ticker, "UPDATE fleet.schedules SET next_run_at = next_run_at + interval '1 hour'") == 2
    assert (
        allowed(
            ticker,
            "UPDATE fleet.schedules SET next_run_at = now() + interval '7 days 59 minutes' WHERE name = 'hourly'",
        )
        == 1
    )
    assert (
        allowed(
            ticker,
            "UPDATE fleet.schedules SET next_run_at = now() + interval '14 days' WHERE name = 'weekdays'",
        )
        == 1
    )
    assert (
        allowed(
            ticker,
            "UPDATE fleet.schedules SET missed_slots = missed_slots + 3, broken_at = now(), broken_error = 'x'",
        )
        == 2
    )
    assert allowed(ticker, "UPDATE fleet.schedules SET broken_at = NULL, broken_error = NULL") == 2
    assert (
        allowed(
            ticker,
            "UPDATE fleet.schedules SET cadence_from = now(), cadence_gap = interval '1 day', cadence_mid = now()"
            " + interval '4 days', cadence_until = now() + interval '7 days' WHERE name = 'weekdays'",
        )
        == 1
    )


def test_every_reader_answers_with_the_values_the_roles_may_still_write(
    rows: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The ends of what a ticker and a worker may still write, written as those roles, then every
    reader asked as the reader role."""
    low, high = "'1000-01-01T00:00Z'", "'8999-12-31T23:59:59.999999Z'"
    conn.execute("INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('t', 'ticker', 'h', 1)")
    conn.execute("INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('w', 'worker', 'h', 1)")
    conn.execute("INSERT INTO fleet.schedule_stats (name) SELECT name FROM fleet.schedules")
    for sql in (
        "UPDATE fleet.schedules SET next_run_at = now() + interval '7 days' + fleet.timing_longest_gap(every, cron, dst_missing),"
        f" missed_slots = 9223372036854775807, broken_at = {low}",
        f"UPDATE fleet.schedules SET cadence_from = {low}, cadence_mid = {high}, cadence_until = {high},"
        " cadence_gap = interval '8 days', cadence_hash = 'x' WHERE name = 'weekdays'",
        f"UPDATE fleet.schedule_stats SET last_success_slot = {high}, last_success_at = {low},"
        f" last_slot = {low}, last_finished_at = {high}, last_status = 'dead'",
        f"UPDATE fleet.processes SET started_at = {high}, seen_at = {low}, crashed_at = {high},"
        " crashes = 2147483647, running = -2147483648",
        f"INSERT INTO fleet.chores (name, due_at, mark, stepped_at) VALUES ('health_rollup', {high}, {high}, {low})"
        f" ON CONFLICT (name) DO UPDATE SET due_at = {high}, mark = {high}, stepped_at = {low}",
    ):
        assert allowed(rows["ticker"], sql) >= 1, sql
    for sql in (
        f"UPDATE fleet.job_runs SET started_at = {low}, locked_until = now() + interval '7 days',"
        f" locked_pid = -1, trace_id = 'not hex', span_id = '' WHERE {run(RUNNING)}",
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at,"
        f" finished_at, outcome, trace_id, traced) VALUES ('hourly', '{RUNNING}', 2, 'w1', {high}, {low},"
        " 'done', 'not hex', true)",
        f"UPDATE fleet.job_runs SET status = 'done', locked_by = NULL, locked_until = NULL, finished_at = {low}"
        f" WHERE {run(RUNNING)}",
        f"UPDATE fleet.processes SET started_at = {low}, seen_at = {high}, crashed_at = {low}, pid = -1",
    ):
        assert allowed(rows["worker"], sql) >= 1, sql
    with dashboard_at(rows["reader"]) as base:
        assert not (failed := reader_failures(rows["reader"], base, capsys)), failed
