"""Least privilege: a ticker, a worker and fleetctl run as login roles granted fleet_ticker,
fleet_worker, fleet_operator and fleet_reader do their work; each role is refused what it must not
do; a permission error is one line and exit 2, naming the role and what to grant."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from fleet.db import connect
from fleet.ops.cli import main as fleetctl
from tests.support import (
    FAST,
    Proc,
    env_for,
    fleetctl_cmd,
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
    suffix = f"{os.getpid()}"
    names = {kind: f"t_{kind}_{suffix}" for kind in KINDS}
    with connect(server_url, "fleet-tests roles") as admin:
        for kind, name in names.items():
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')
            admin.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE fleet_{kind}')
    try:
        yield {kind: make_conninfo(db_url, user=name) for kind, name in names.items()}
    finally:
        with connect(server_url, "fleet-tests roles") as admin:
            for name in names.values():
                admin.execute(f'DROP ROLE IF EXISTS "{name}"')


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
