"""Operating a real fleet: each unhealthy verdict built with real ticker and worker processes and read
back through `fleetctl status` (exit code and numbers), workers listed, and one log line per attempt
event, with no secret in any of them."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict

from fleet.health.results import ScheduleHealth
from fleet.ops.status import schedule_health
from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    fleetctl_cmd,
    processes,
    scalar,
    ticker_cmd,
    wait_for,
    worker_cmd,
)

ATTEMPT_FIELDS = {
    "schedule",
    "slot",
    "attempt",
    "worker_id",
    "event",
    "outcome",
    "duration_ms",
    "error",
    "trace_id",
}
ATTEMPT_EVENTS = {
    "claimed",
    "heartbeat_lost",
    "finished",
    "retried",
    "dead",
    "reclaimed",
    "cancelled",
    "fenced",
    "handed_back",
}


def start(procs: list[Proc], db_url: str, tmp: Path, name: str, argv: list[str]) -> Proc:
    p = Proc(argv, env_for(db_url, FLEET_TEST_DIR=str(tmp)), tmp / f"{name}.log")
    procs.append(p)
    return p


def ticker(procs: list[Proc], db_url: str, tmp: Path, *extra: str) -> Proc:
    return start(procs, db_url, tmp, "ticker", ticker_cmd("--poll", "0.5", "--id", "t1", *extra))


def worker(procs: list[Proc], db_url: str, tmp: Path, wid: str = "w1", *extra: str) -> Proc:
    return start(procs, db_url, tmp, wid, worker_cmd("--app", "fleet_test_jobs", "--id", wid, *FAST, *extra))


def status(db_url: str, *names: str) -> tuple[int, list[dict[str, Any]]]:
    """`fleetctl status --json` as a monitoring system runs it: (exit code, parsed output)."""
    done = subprocess.run(
        fleetctl_cmd("status", "--json", *names),
        env=env_for(db_url),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, orjson.loads(done.stdout)


def health(conn: psycopg.Connection[Any], name: str) -> ScheduleHealth:
    (h,) = schedule_health(conn, [name])
    return h


def test_late_when_the_fleet_stops(db_url: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    apply_text(conn, '[[schedule]]\nname = "every-second"\nevery = "1s"\njob = "noop"\n')
    with processes() as procs:
        # Slots only when due: the worker drains every run before the fleet stops (runs created
        # ahead would wait for their time).
        t = ticker(procs, db_url, tmp_path, "--lookahead", "0")
        w = worker(procs, db_url, tmp_path)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") >= 2,
            timeout=20,
            what="runs to succeed",
        )
        code, (s,) = status(db_url)
        assert (code, s["verdict"]) == (0, "OK") and s["since_last_success_s"] < 2
        # the whole fleet stops: first the ticker, then the workers once they drained
        t.signal(signal.SIGTERM)
        assert t.wait(10) == 0
        wait_for(
            lambda: (
                scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status IN ('pending', 'running')")
                == 0
            ),
            what="the worker to drain",
        )
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
    wait_for(lambda: "LATE" in health(conn, "every-second").problems, timeout=10, what="LATE")
    code, (s,) = status(db_url, "every-second")
    # with the ticker gone, the cause comes first: no live ticker creates its slots
    assert code == 1 and s["verdict"] == "NO-TICKER" and s["problems"] == ["NO-TICKER", "LATE"]
    assert s["since_last_success_s"] > 2 * s["interval_s"] == 2.0
    assert (s["dead_runs"], s["oldest_pending_age_s"], s["last_outcome"]) == (0, None, "done")


def test_dead_after_a_permanent_failure_until_discarded(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(conn, '[[schedule]]\nname = "broken"\nevery = "2s"\njob = "permanent"\n')
    with processes() as procs:
        ticker(procs, db_url, tmp_path)
        worker(procs, db_url, tmp_path)
        wait_for(lambda: health(conn, "broken").dead_runs >= 1, timeout=20, what="a dead run")
        code, (s,) = status(db_url, "broken")
        assert code == 1 and s["verdict"] == "DEAD" and s["dead_runs"] >= 1
        assert s["last_outcome"] == "dead" and "Permanent" in s["last_error"]
    done = subprocess.run(
        fleetctl_cmd("discard", "--all-dead", "broken"),
        env=env_for(db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "discarded" in done.stdout
    code, (s,) = status(db_url, "broken")
    assert s["dead_runs"] == 0 and "DEAD" not in s["problems"]


def test_backlog_when_runs_wait_longer_than_an_interval(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # a job that takes 3 s, one slot a second, one at a time: due runs pile up
    apply_text(
        conn,
        '[[schedule]]\nname = "slow"\nevery = "1s"\njob = "sleep"\nargs = { seconds = 3 }\n'
        'overlap = "queue"\n',
    )
    with processes() as procs:
        ticker(procs, db_url, tmp_path)
        worker(procs, db_url, tmp_path)
        wait_for(lambda: health(conn, "slow").verdict == "BACKLOG", timeout=20, what="BACKLOG")
        code, (s,) = status(db_url, "slow")
    assert code == 1 and s["verdict"] == "BACKLOG"
    assert s["oldest_pending_age_s"] > s["interval_s"] == 1.0 and s["pending_runs"] >= 1
    assert s["job_served"] is True and s["unserved_runs"] == 0 and s["dead_runs"] == 0


def test_no_worker_for_a_job_nobody_registered_and_workers_lists_the_fleet(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "orphan"\nevery = "1s"\njob = "nobody.serves.this"\n'
        '[[schedule]]\nname = "fine"\nevery = "1s"\njob = "noop"\n',
    )
    with processes() as procs:
        t = ticker(procs, db_url, tmp_path)
        w = worker(procs, db_url, tmp_path)
        wait_for(
            lambda: health(conn, "orphan").unserved_runs >= 1 and health(conn, "fine").since_last_success_s,
            timeout=20,
            what="unserved runs",
        )
        code, found = status(db_url)
        by = {s["name"]: s for s in found}
        assert code == 1 and by["orphan"]["verdict"] == "NO-WORKER" and by["fine"]["verdict"] == "OK"
        assert by["orphan"]["job_served"] is False and by["orphan"]["unserved_runs"] >= 1
        assert status(db_url, "fine")[0] == 0

        listed = subprocess.run(
            fleetctl_cmd("workers", "--json"),
            env=env_for(db_url),
            capture_output=True,
            timeout=60,
            check=True,
        )
        procs_seen = {p["id"]: p for p in orjson.loads(listed.stdout)}
        assert set(procs_seen) == {"t1", "w1"}
        assert (procs_seen["w1"]["kind"], procs_seen["w1"]["pid"]) == ("worker", w.pid)
        assert (procs_seen["t1"]["kind"], procs_seen["t1"]["pid"]) == ("ticker", t.pid)
        assert "noop" in procs_seen["w1"]["jobs"] and "nobody.serves.this" not in procs_seen["w1"]["jobs"]
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        listed = subprocess.run(
            fleetctl_cmd("workers", "--json"),
            env=env_for(db_url),
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert [p["id"] for p in orjson.loads(listed.stdout)] == ["t1"]  # a stopped worker is gone at once


def _with_password(db_url: str, password: str) -> str:
    """The test database as a URI that carries a password (the local server trusts it anyway)."""
    parts = conninfo_to_dict(db_url)
    return f"postgresql://{parts.get('user', 'postgres')}:{password}@/{parts['dbname']}?host={parts['host']}"


def test_one_json_line_per_attempt_event_and_no_secret_in_any_log(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    secret = "s3cret-Pa55word"
    url = _with_password(db_url, secret)
    apply_text(
        conn,
        '[[schedule]]\nname = "flaky"\nevery = "1d"\njob = "flaky"\nargs = { fail_times = 1 }\n'
        'retry = { base = "200ms" }\nstart_at = "2099-01-01T00:00:00Z"\n'
        '[[schedule]]\nname = "broken"\nevery = "1d"\njob = "permanent"\n'
        'start_at = "2099-01-01T00:00:00Z"\n'
        '[[schedule]]\nname = "overlapping"\nevery = "1d"\njob = "sleep"\nargs = { seconds = 0.2 }\n'
        'overlap = "skip"\nstart_at = "2099-01-01T00:00:00Z"\n',
    )
    # two slots of a schedule that must not overlap, due together: one runs, the other is skipped
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, '2026-01-01'::timestamptz + g * interval '1 day', job, args, overlap, now() "
        "FROM fleet.schedules, generate_series(0, 1) g WHERE name = 'overlapping'"
    )
    for name in ("flaky", "broken"):
        subprocess.run(
            fleetctl_cmd("--database-url", url, "trigger", name),
            env=env_for(db_url),
            timeout=60,
            check=True,
            capture_output=True,
        )
    with processes() as procs:
        w = start(
            procs,
            url,
            tmp_path,
            "w1",
            worker_cmd("--app", "fleet_test_jobs", "--id", "w1", "--concurrency", "4", *FAST),
        )
        t = start(procs, url, tmp_path, "ticker", ticker_cmd("--poll", "0.5", "--log-format", "text"))
        wait_for(
            lambda: (
                scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status IN ('pending', 'running')")
                == 0
            ),
            timeout=20,
            what="every run to end",
        )
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        t.signal(signal.SIGTERM)
        assert t.wait(10) == 0
        worker_out, ticker_out = w.output(), t.output()
    records = [orjson.loads(line) for line in worker_out.splitlines()]  # every line is JSON
    started = next(r for r in records if r["event"] == "worker_started")
    assert secret not in started["database"] and started["database"].startswith("postgresql://")
    assert secret not in worker_out and secret not in ticker_out
    assert "ticker_started" in ticker_out and not ticker_out.lstrip().startswith("{")  # --log-format text

    attempts = [r for r in records if r["event"] in ATTEMPT_EVENTS]
    for r in attempts:
        assert set(r) >= ATTEMPT_FIELDS, (r["event"], ATTEMPT_FIELDS - set(r))
        assert r["worker_id"] == "w1" and len(r["trace_id"]) == 32
    story = [(r["schedule"], r["attempt"], r["event"], r["outcome"]) for r in attempts]
    assert [s for s in story if s[0] == "flaky"] == [
        ("flaky", 1, "claimed", None),
        ("flaky", 1, "retried", "failed"),
        ("flaky", 2, "claimed", None),
        ("flaky", 2, "finished", "done"),
    ]
    assert [s for s in story if s[0] == "broken"] == [
        ("broken", 1, "claimed", None),
        ("broken", 1, "dead", "dead"),
    ]
    (skipped,) = [r for r in records if r["event"] == "skipped"]
    assert set(skipped) >= ATTEMPT_FIELDS and skipped["schedule"] == "overlapping"
    ended = [r for r in attempts if r["event"] in ("retried", "finished", "dead")]
    assert all(r["duration_ms"] is not None and r["duration_ms"] >= 0 for r in ended)
    assert all(r["error"] for r in ended if r["outcome"] != "done")
    slots = {r["schedule"]: r["slot"] for r in attempts if r["schedule"] != "overlapping"}
    for name, slot in slots.items():
        shown = subprocess.run(
            fleetctl_cmd("show", name, slot, "--json"),
            env=env_for(db_url),
            timeout=60,
            check=True,
            capture_output=True,
        )
        history = orjson.loads(shown.stdout)["attempt_history"]
        assert [a["trace_id"] for a in history] == [
            r["trace_id"] for r in attempts if r["schedule"] == name and r["event"] != "claimed"
        ]
