"""Real worker processes: crashes, pauses, retries, timeouts, overlap, graceful stop, command jobs."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    job_events,
    one_run,
    processes,
    scalar,
    wait_for,
    worker_cmd,
)


def worker(
    procs: list[Proc], db_url: str, tmp: Path, wid: str, *extra: str, env: dict[str, str] | None = None
) -> Proc:
    p = Proc(
        worker_cmd("--app", "fleet_test_jobs", "--id", wid, *FAST, *extra),
        env_for(db_url, FLEET_TEST_DIR=str(tmp), **(env or {})),
        tmp / f"{wid}.log",
    )
    procs.append(p)
    return p


def run_row(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    r = conn.execute("SELECT * FROM fleet.job_runs WHERE schedule_name = 's'").fetchone()
    assert r is not None
    return dict(r)


def test_sigkill_mid_run_is_finished_by_another_worker(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 1.5 }")
    with processes() as procs:
        a = worker(procs, db_url, tmp_path, "a")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        b = worker(procs, db_url, tmp_path, "b")
        a.signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: run_row(conn)["status"] == "done", timeout=20, what="the run to be done")
        finished_after = time.monotonic() - killed
        starts = [e for e in job_events(tmp_path) if e[0] == "start"]
        assert [e[3] for e in starts] == ["a", "b"]
        assert b.popen.poll() is None
    r = run_row(conn)
    assert r["attempts"] == 2 and r["locked_by"] is None
    done = [e for e in job_events(tmp_path) if e[0] == "done"]
    assert len(done) == 1 and done[0][2] == "2"
    # lease 2 s + poll 0.5 s to retake it, plus the 1.5 s the handler takes
    assert finished_after < 2 + 0.5 + 1.5 + 1.5, finished_after
    print(f"SIGKILL: run finished {finished_after:.2f}s after the kill (lease 2s, poll 0.5s, job 1.5s)")


def test_sigstop_zombie_changes_nothing_and_cancels_its_handler(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 5 }")
    owner = ("status", "attempts", "finished_at", "locked_by", "failures")
    with processes() as procs:
        a = worker(procs, db_url, tmp_path, "a")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        a.signal(signal.SIGSTOP)
        worker(procs, db_url, tmp_path, "b")
        wait_for(lambda: run_row(conn)["attempts"] == 2, timeout=20, what="b to take the run over")
        taken = run_row(conn)
        a.signal(signal.SIGCONT)  # the zombie wakes with its handler still running
        wait_for(
            lambda: any(e[0] == "cancelled" and e[3] == "a" for e in job_events(tmp_path)),
            timeout=10,
            what="the zombie to cancel its handler",
        )
        time.sleep(1.0)  # several heartbeat periods of the resumed zombie
        assert {k: run_row(conn)[k] for k in owner} == {k: taken[k] for k in owner}
        assert run_row(conn)["locked_until"] >= taken["locked_until"]  # only b renews it
        wait_for(lambda: run_row(conn)["status"] == "done", timeout=20, what="b to finish the run")
        assert "heartbeat_lost" in a.output()
        assert a.popen.poll() is None  # the zombie keeps serving after losing one run
    r = run_row(conn)
    assert (r["status"], r["attempts"], r["locked_by"]) == ("done", 2, None)
    hist = conn.execute("SELECT worker_id, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    assert hist == [{"worker_id": "a", "outcome": "lease_expired"}, {"worker_id": "b", "outcome": "done"}]
    assert [e[3] for e in job_events(tmp_path) if e[0] == "done"] == ["b"]


def test_retries_back_off_within_their_ceilings_then_dead(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "fail", retry='{ max_attempts = 5, base = "1s", cap = "4s" }')
    with processes() as procs:
        worker(procs, db_url, tmp_path, "a")
        wait_for(lambda: run_row(conn)["status"] == "dead", timeout=30, what="the run to go dead")
    hist = conn.execute(
        "SELECT attempt, started_at, finished_at, outcome FROM fleet.job_attempts ORDER BY attempt"
    ).fetchall()
    assert [h["attempt"] for h in hist] == [1, 2, 3, 4, 5]
    assert [h["outcome"] for h in hist] == ["failed"] * 4 + ["dead"]
    for prev, nxt, ceiling in zip(hist[:-1], hist[1:], [1, 2, 4, 4], strict=True):
        gap = (nxt["started_at"] - prev["finished_at"]).total_seconds()
        assert 0 <= gap <= ceiling + 0.5, (prev["attempt"], gap, ceiling)
    r = run_row(conn)
    assert r["failures"] == 5 and "always fails" in r["last_error"]


def test_permanent_error_goes_dead_after_one_attempt(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "permanent")
    with processes() as procs:
        worker(procs, db_url, tmp_path, "a")
        wait_for(lambda: run_row(conn)["status"] == "dead", what="dead")
    r = run_row(conn)
    assert r["attempts"] == 1 and "Permanent" in r["last_error"]


def test_timeout_is_a_failed_attempt(db_url: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    one_run(conn, "sleep", "{ seconds = 30 }", timeout='"1s"', retry='{ max_attempts = 2, base = "1s" }')
    with processes() as procs:
        worker(procs, db_url, tmp_path, "a")
        wait_for(lambda: run_row(conn)["status"] == "dead", timeout=20, what="dead after two timeouts")
    outcomes = [r["outcome"] for r in conn.execute("SELECT outcome FROM fleet.job_attempts ORDER BY attempt")]
    assert outcomes == ["timeout", "dead"]
    assert "timed out" in run_row(conn)["last_error"]
    assert sum(1 for e in job_events(tmp_path) if e[0] == "cancelled") == 2


def test_four_workers_run_each_of_200_runs_once(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1s"\njob = "noop"\noverlap = "allow"\n'
        'start_at = "2099-01-01T00:00:00Z"\n',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "SELECT 's', '2026-01-01'::timestamptz + make_interval(secs => g), 'noop', 'allow', now() "
        "FROM generate_series(1, 200) g"
    )
    with processes() as procs:
        for i in range(4):
            worker(procs, db_url, tmp_path, f"w{i}", "--claim-batch", "5", "--concurrency", "2")
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 200,
            timeout=60,
            what="200 runs done",
        )
    done = [e for e in job_events(tmp_path) if e[0] == "done"]
    assert len(done) == 200 and len({e[1] for e in done}) == 200
    assert scalar(conn, "SELECT max(attempts) FROM fleet.job_runs") == 1
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 200
    per_worker = {
        r["worker_id"]: r["n"]
        for r in conn.execute("SELECT worker_id, count(*) AS n FROM fleet.job_attempts GROUP BY worker_id")
    }
    print(f"200 runs over 4 workers: {per_worker}")


def test_heartbeats_racing_the_finishes_lose_no_result(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The heartbeat renews leases on its own connection while the loop finishes the same runs. With
    a renewal every 20 ms and batches of 100 they collide many times over 20,000 runs: every result
    must still be recorded by the attempt that produced it (none fenced, none run twice)."""
    n = 20_000
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1s"\njob = "noop"\noverlap = "allow"\n'
        'start_at = "2099-01-01T00:00:00Z"\n',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "SELECT 's', '2026-01-01'::timestamptz + make_interval(secs => g), 'noop', 'allow', now() "
        "FROM generate_series(1, %s) g",
        (n,),
    )
    with processes() as procs:
        w = worker(
            procs,
            db_url,
            tmp_path,
            "w",
            "--heartbeat",
            "0.02",
            "--concurrency",
            "100",
            "--claim-batch",
            "100",
            "--until-idle",
        )
        assert w.wait(120) == 0, w.output()[-2000:]
        stopped = [line for line in w.output().splitlines() if '"event":"worker_stopped"' in line]
    assert len(stopped) == 1 and '"fenced":0' in stopped[0], stopped
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == n
    assert scalar(conn, "SELECT max(attempts) FROM fleet.job_runs") == 1
    done = [e for e in job_events(tmp_path) if e[0] == "done"]
    assert len(done) == n and len({e[1] for e in done}) == n


def test_sigterm_hands_the_run_back_at_once(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    one_run(conn, "sleep", "{ seconds = 60 }")
    with processes() as procs:
        a = worker(procs, db_url, tmp_path, "a", "--lease", "30", "--heartbeat", "5", "--grace", "1")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        worker(procs, db_url, tmp_path, "b", "--lease", "30", "--heartbeat", "5")
        time.sleep(0.3)
        a.signal(signal.SIGTERM)
        sent = time.monotonic()
        assert a.wait(timeout=10) == 0
        exited = time.monotonic() - sent
        wait_for(lambda: run_row(conn)["attempts"] == 2, timeout=10, what="b to retake the run")
        retaken = time.monotonic() - sent
    assert exited < 1 + 2, exited
    assert retaken < 5, retaken  # far below the 30 s lease
    hist = conn.execute("SELECT worker_id, outcome FROM fleet.job_attempts ORDER BY attempt").fetchall()
    assert hist == [{"worker_id": "a", "outcome": "handed_back"}]
    r = run_row(conn)
    assert (r["locked_by"], r["status"], r["last_outcome"]) == ("b", "running", "handed_back")
    assert r["failures"] == 0  # a hand-back spends no retry budget
    print(f"SIGTERM: worker exited after {exited:.2f}s, run retaken after {retaken:.2f}s (lease 30s)")


def test_command_jobs_exit_codes(db_url: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f"""
[[job]]
name = "cmd"
argv = ["sh", "-c", "echo $FLEET_IDEMPOTENCY_KEY $FLEET_ATTEMPT >> {tmp_path}/cmd.out; exit $(cat {tmp_path}/code)"]
permanent_exit_codes = [3]
""")
    one_run(conn, "cmd")
    with processes() as procs:
        (tmp_path / "code").write_text("1")
        w = Proc(worker_cmd("--jobs", str(jobs), "--id", "c", *FAST), env_for(db_url), tmp_path / "c.log")
        procs.append(w)
        wait_for(lambda: run_row(conn)["failures"] == 1, what="a retryable failure")
        assert run_row(conn)["status"] in ("pending", "running")
        (tmp_path / "code").write_text("3")
        conn.execute("UPDATE fleet.job_runs SET run_after = now() WHERE status = 'pending'")
        wait_for(lambda: run_row(conn)["status"] == "dead", what="a permanent exit code")
        conn.execute("UPDATE fleet.job_runs SET status = 'pending', run_after = now(), failures = 0")
        (tmp_path / "code").write_text("0")
        wait_for(lambda: run_row(conn)["status"] == "done", what="exit 0")
    lines = (tmp_path / "cmd.out").read_text().split("\n")
    key = f"s:{run_row(conn)['scheduled_for'].isoformat().replace('+00:00', 'Z')}"
    assert lines[0] == f"{key} 1" and lines[1] == f"{key} 2" and lines[2] == f"{key} 3"


@pytest.mark.parametrize("overlap", ["skip", "queue", "allow"])
def test_overlap_policies_with_a_slow_job(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, overlap: str
) -> None:
    apply_text(
        conn,
        f'[[schedule]]\nname = "s"\nevery = "1d"\njob = "sleep"\nargs = {{ seconds = 1.2 }}\n'
        f'overlap = "{overlap}"\nstart_at = "2099-01-01T00:00:00Z"\n',
    )
    # Three slots a little apart, all due within the first run's duration.
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT 's', '2026-01-01'::timestamptz + make_interval(secs => g), job, args, overlap, "
        "now() + make_interval(secs => g * 0.3) FROM fleet.schedules, generate_series(0, 2) g"
    )
    with processes() as procs:
        for wid in ("a", "b"):
            worker(procs, db_url, tmp_path, wid, "--concurrency", "2")
        wait_for(
            lambda: (
                scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status IN ('pending', 'running')")
                == 0
            ),
            timeout=20,
            what="all slots settled",
        )
    rows = conn.execute(
        "SELECT status::text, last_error FROM fleet.job_runs ORDER BY scheduled_for"
    ).fetchall()
    spans = conn.execute(
        "SELECT started_at, finished_at FROM fleet.job_attempts ORDER BY started_at"
    ).fetchall()
    overlapping = any(b["started_at"] < a["finished_at"] for a, b in zip(spans, spans[1:], strict=False))
    statuses = [r["status"] for r in rows]
    if overlap == "skip":
        assert statuses == ["done", "skipped", "skipped"] and "overlap" in rows[1]["last_error"]
        assert not overlapping
    elif overlap == "queue":
        assert statuses == ["done", "done", "done"] and not overlapping
    else:
        assert statuses == ["done", "done", "done"] and overlapping
