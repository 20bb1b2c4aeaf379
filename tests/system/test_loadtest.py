"""The load test (`python -m loadtest`): the short profile passes under its faults, and its audit fails
when a finished load test's database is tampered with.

The short profile runs once for the module, on an embedded PostgreSQL in a temporary directory (which
it restarts as one of its faults), or, with FLEET_DATABASE_URL, in a fresh database on that server
(restarted only when FLEET_LOADTEST_PG_RESTART_CMD says how). Every process it starts it stops itself;
the embedded server it leaves running for the audit test is stopped here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from fleet.store.db import connect
from tests.support import ROOT, wait_for


@dataclass
class Finished:
    code: int
    output: str
    report: dict[str, Any]
    url: str
    workdir: Path
    restartable: bool
    seconds: float


def loadtest(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def finished() -> Iterator[Finished]:
    workdir = Path(tempfile.mkdtemp(prefix="flt", dir="/tmp"))  # short: unix socket paths
    workdir.chmod(0o755)  # the embedded PostgreSQL runs as its own user when the tests run as root
    server = os.environ.get("FLEET_DATABASE_URL")
    restart_cmd = os.environ.get("FLEET_LOADTEST_PG_RESTART_CMD")
    args = [
        "run",
        "--profile",
        "short",
        "--workdir",
        str(workdir / "run"),
        "--json",
        str(workdir / "report.json"),
        "--png",
        str(workdir / "timeline.png"),
    ]
    if server:
        args += ["--database-url", server] + (["--pg-restart-cmd", restart_cmd] if restart_cmd else [])
    else:
        args += ["--keep-database"]
    started = time.monotonic()
    done = loadtest(*args, timeout=200)
    seconds = time.monotonic() - started
    print(done.stdout, done.stderr, sep="\n")
    report = json.loads((workdir / "report.json").read_text()) if (workdir / "report.json").exists() else {}
    name = report.get("settings", {}).get("database_name", "")
    url = ""
    try:
        if server:
            url = make_conninfo(server, dbname=name) if name else ""
        elif (workdir / "run" / ".fleet" / "pgdata" / "postmaster.pid").exists():
            from fleet.store.embedded import embedded_url

            url = make_conninfo(embedded_url(workdir / "run"), dbname=name)
        yield Finished(
            done.returncode,
            done.stdout + done.stderr,
            report,
            url,
            workdir,
            bool(not server or restart_cmd),
            seconds,
        )
    finally:
        if server and name:
            with connect(server, "loadtest test cleanup") as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        from fleet.store.embedded import stop_embedded

        stop_embedded(workdir / "run")
        shutil.rmtree(workdir, ignore_errors=True)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def test_short_profile_passes_under_kills_zombies_and_a_database_restart(finished: Finished) -> None:
    assert finished.code == 0, finished.output
    r = finished.report
    assert r["verdict"] == "PASS" and "VERDICT: PASS" in finished.output
    f = r["figures"]
    assert f["faults"]["worker_kill"] >= 20
    assert f["faults"]["zombie"] >= 3
    assert f["faults"]["ticker_kill"] >= 1 and f["faults"]["worker_restart"] >= 1
    assert f["faults"]["starvation"] >= 1
    if finished.restartable:
        assert f["faults"]["pg_restart"] == 1
    assert f["runs_lost"] == 0 and f["duplicate_side_effects"] == 0
    assert f["slots_due"] > 500 and f["done"] + f["dead"] == f["slots_due"]
    # Dead: the slots that drew a permanent failure, and any whose retry budget faults used up (each
    # kill, stall or outage that cuts an attempt off spends a try): rare in one window.
    assert f["dead"] == f["dead_expected_exact"] + f["dead_retry_budget"]
    assert f["dead_retry_budget"] <= 2, f["dead_retry_budget_examples"]
    # The kills landed mid-run: the runs they held were reclaimed, within lease + poll.
    assert f["reclaim_after_kill_s"]["n"] >= 20
    assert f["reclaim_after_kill_outside_outages_s"]["max"] <= f["reclaim_bound_s"]
    assert f["duplicate_executions"] > 0  # at-least-once has a price, and the report shows it
    png = finished.workdir / "timeline.png"
    assert png.exists() or "matplotlib is not installed" in finished.output
    assert finished.seconds < 120, f"the short profile took {finished.seconds:.0f} s"


def test_audit_catches_a_lost_run_a_doubled_effect_and_a_run_left_pending(finished: Finished) -> None:
    if not finished.url:
        pytest.skip("the load test left no database to tamper with")
    clean = loadtest("audit", "--database-url", finished.url, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    with connect(finished.url, "loadtest tamper") as conn:
        done = conn.execute(
            "SELECT schedule_name, scheduled_for FROM fleet.job_runs WHERE status = 'done' "
            "ORDER BY scheduled_for LIMIT 3"
        ).fetchall()
        deleted, pending, doubled = done
        conn.execute(
            "DELETE FROM fleet.job_runs WHERE schedule_name = %(schedule_name)s "
            "AND scheduled_for = %(scheduled_for)s",
            deleted,
        )
        conn.execute(
            "UPDATE fleet.job_runs SET status = 'pending', finished_at = NULL WHERE schedule_name = "
            "%(schedule_name)s AND scheduled_for = %(scheduled_for)s",
            pending,
        )
        conn.execute(
            "INSERT INTO loadtest_ledger (idempotency_key, schedule_name, scheduled_for, attempt, worker_id) "
            "SELECT idempotency_key, schedule_name, scheduled_for, attempt + 1, 'tamper' "
            "FROM loadtest_ledger "
            "WHERE schedule_name = %(schedule_name)s AND scheduled_for = %(scheduled_for)s",
            doubled,
        )
    out_json = finished.workdir / "tampered.json"
    tampered = loadtest("audit", "--database-url", finished.url, "--json", str(out_json), timeout=60)
    print(tampered.stdout, tampered.stderr)
    assert tampered.returncode == 1
    r = json.loads(out_json.read_text())
    assert r["verdict"] == "FAIL"
    lost = check(r, "runs lost")
    assert not lost["ok"] and lost["value"] == 2
    assert "due slots without a row: 1, not finished: 1" in lost["detail"]
    dup = check(r, "duplicate side effects")
    assert not dup["ok"] and dup["value"] == 1
    assert not check(r, "effects of runs not done")["ok"]
    keys = {
        f"{row['schedule_name']}:{row['scheduled_for'].strftime('%Y-%m-%dT%H:%M:%SZ')}"
        for row in (deleted, pending, doubled)
    }
    shown = "\n".join(lost["examples"] + dup["examples"])
    assert all(k in shown for k in keys), shown
    assert "VERDICT: FAIL" in tampered.stdout


# The cheapest real run: the embedded database, one schedule, one ticker and one worker, the
# shortest window, no faults.
TINY = [
    "run",
    *("--duration", "10", "--schedules", "1", "--periods", "1", "--workers", "1", "--tickers", "1"),
    *("--concurrency", "1", "--transient", "0", "--permanent", "0", "--job-duration", "fixed:0"),
    *("--kills", "0", "--zombies", "0", "--restarts", "0", "--ticker-kills", "0"),
    *("--pg-restarts", "0", "--starvations", "0"),
]


def work_directory(output: str) -> Path:
    m = re.search(r"^loadtest: work directory (\S+) ", output, re.MULTILINE)
    assert m, output
    return Path(m.group(1))


def processes_naming(path: Path) -> list[str]:
    """The command lines of live processes that name `path` (its database server, supervisord)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if str(path) in text:
                found.append(text)
    return found


def test_a_run_without_workdir_leaves_no_work_files_behind() -> None:
    done = loadtest(*TINY, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    workdir = work_directory(done.stdout)
    assert not workdir.exists(), f"left behind: {workdir}"
    assert processes_naming(workdir) == []
    assert "removed at the end" in done.stdout


def test_a_run_interrupted_with_ctrl_c_stops_everything_and_removes_its_work_files(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    log = tmp_path / "loadtest.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadtest", *TINY], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        # The fleet runs and its load is applied: the embedded database and supervisord's processes
        # run, their files in the work directory.
        wait_for(lambda: "slots/s, first slot at" in log.read_text(), 90, what="the fleet to run its load")
        workdir = work_directory(log.read_text())
        assert (workdir / ".fleet" / "pgdata").is_dir() and processes_naming(workdir)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 2, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    output = log.read_text()
    assert "interrupted (SIGINT); stopping everything" in output
    assert not workdir.exists(), f"left behind: {workdir}"
    assert processes_naming(workdir) == []


def test_a_run_that_cannot_run_removes_its_work_files_too() -> None:
    # A server that refuses connections (nothing listens on loopback port 1): exit 2 after the work
    # directory was made.
    done = loadtest(
        *TINY, "--database-url", "postgresql://fleet@127.0.0.1:1/fleet?connect_timeout=2", timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the load test could not run" in done.stderr
    workdir = work_directory(done.stdout)
    assert not workdir.exists(), f"left behind: {workdir}"
