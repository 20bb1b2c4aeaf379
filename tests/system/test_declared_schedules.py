"""A worker whose application declares schedules in code that the database holds otherwise (or not
at all) says so once, when it starts, with the fields that differ and the command that applies them;
one whose declarations are applied says nothing."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    fleetctl_cmd,
    job_events,
    log_events,
    processes,
    wait_for,
    worker_cmd,
)

APP = "fleet_declared_jobs"
EVENT = "declared_schedules_differ"


def run_one_through(conn: psycopg.Connection[Any], tmp: Path, done: int) -> None:
    """A run of declared.tick due now, and the worker's rounds until it is done (the `done`-th)."""
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after) "
        "VALUES ('declared.tick', now() - make_interval(secs => %s), 'declared.tick', now())",
        (done,),
    )
    conn.execute("NOTIFY fleet_runs")
    wait_for(lambda: len([e for e in job_events(tmp) if e[0] == "done"]) >= done, what=f"run {done} done")


def test_a_worker_says_once_which_declared_schedules_differ_from_the_database(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Applied from a file, before the code changed: another interval and args; the cron not at all.
    apply_text(
        conn,
        '[[schedule]]\nname = "declared.tick"\nevery = "10m"\njob = "declared.tick"\nargs = { region = "us" }\n',
    )
    with processes() as procs:
        w = Proc(
            worker_cmd("--app", APP, "--id", "w", *FAST),
            env_for(db_url, FLEET_TEST_DIR=str(tmp_path)),
            tmp_path / "w.log",
        )
        procs.append(w)
        wait_for(lambda: any(e["event"] == EVENT for e in log_events(w)), what="the worker to say so")
        for n in (1, 2, 3):  # rounds after the first: it is not said again
            run_one_through(conn, tmp_path, n)
        said = [e for e in log_events(w) if e["event"] == EVENT]
    assert len(said) == 1, said
    (e,) = said
    assert e["worker_id"] == "w" and e["command"] == f"fleetctl apply --app {APP}" and e["more"] == 0
    assert e["schedules"] == [
        {
            "schedule": "declared.tick",
            "change": "replan",
            "fields": [
                {"field": "every", "database": "10m", "code": "5m"},
                {"field": "args", "database": '{"region":"us"}', "code": '{"region":"eu"}'},
            ],
        },
        {"schedule": "declared-nightly", "change": "create", "fields": []},
    ]
    assert f"fleetctl apply --app {APP}" in e["message"]
    # Only apply writes schedules: the database still has its own.
    assert conn.execute("SELECT every FROM fleet.schedules WHERE name = 'declared.tick'").fetchone() == {
        "every": timedelta(minutes=10)
    }


def test_a_worker_whose_declared_schedules_are_applied_says_nothing(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    env = env_for(db_url, FLEET_TEST_DIR=str(tmp_path))
    applied = subprocess.run(
        fleetctl_cmd("apply", "--app", APP), env=env, capture_output=True, text=True, timeout=60
    )
    assert applied.returncode == 0, applied.stderr
    with processes() as procs:
        w = Proc(worker_cmd("--app", APP, "--id", "w", *FAST), env, tmp_path / "w.log")
        procs.append(w)
        wait_for(
            lambda: any(e["event"] == "worker_started" for e in log_events(w)), what="the worker to start"
        )
        run_one_through(conn, tmp_path, 1)
        events = [e["event"] for e in log_events(w)]
    assert EVENT not in events, events
