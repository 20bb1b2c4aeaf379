"""A process whose log reader goes away (`fleet-ticker | head -1`) stops as on SIGTERM, exit code 141,
with no traceback and no crash recorded."""

from __future__ import annotations

import select
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson
import psycopg

from tests.support import (
    FAST,
    ROOT,
    apply_text,
    env_for,
    fleetctl_cmd,
    one_run,
    ticker_cmd,
    worker_cmd,
)

# The exit code of a program that SIGPIPE ended, as `fleetctl` returns when its reader goes away.
OUTPUT_GONE = 141


@contextmanager
def piped(argv: list[str], env: dict[str, str], err: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` with its stdout a pipe to this test and its stderr in `err`; killed at the end."""
    with open(err, "wb") as err_file:
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err_file, cwd=ROOT)
        try:
            yield p
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
            if p.stdout is not None and not p.stdout.closed:
                p.stdout.close()


def first_line(out: IO[bytes] | None, timeout: float = 20.0) -> dict[str, Any]:
    """The first line on `out` (a JSON event), read within `timeout` seconds."""
    assert out is not None
    ready, _, _ = select.select([out], [], [], timeout)
    assert ready, f"no line within {timeout}s"
    line: dict[str, Any] = orjson.loads(out.readline())
    return line


def crashes(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT id, kind, crashes, last_error FROM fleet.processes WHERE crashes > 0 OR last_error IS NOT NULL"
    ).fetchall()


def test_a_ticker_whose_reader_went_away_stops_cleanly_without_recording_a_crash(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A schedule due every second: the ticker writes a `tick` line each second after the reader left.
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1s"\njob = "noop"\n')
    with piped(ticker_cmd("--id", "t1", "--poll", "0.2"), env_for(db_url), tmp_path / "err") as p:
        assert first_line(p.stdout)["event"] == "ticker_started"
        assert p.stdout is not None
        p.stdout.close()  # `| head -1`
        code = p.wait(timeout=20)
    assert (tmp_path / "err").read_text() == ""  # no traceback
    assert code == OUTPUT_GONE
    assert crashes(conn) == []
    # It stopped as on SIGTERM: unregistered, not left behind as a crashed ticker.
    assert conn.execute("SELECT id FROM fleet.processes").fetchall() == []
    status = subprocess.run(
        fleetctl_cmd("status", "--json"), env=env_for(db_url), capture_output=True, timeout=60
    )
    assert "TICKER-CRASHING" not in [s["verdict"] for s in orjson.loads(status.stdout)], status


def test_a_worker_whose_reader_went_away_finishes_its_run_and_stops(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    env = env_for(db_url, FLEET_TEST_DIR=str(tmp_path))
    argv = worker_cmd("--app", "fleet_test_jobs", "--id", "w1", *FAST)
    with piped(argv, env, tmp_path / "err") as p:
        assert first_line(p.stdout)["event"] == "worker_started"
        assert p.stdout is not None
        p.stdout.close()
        # Its next line (`claimed`) finds no reader: the run it started still ends as on SIGTERM.
        one_run(conn, "sleep", "{ seconds = 1 }")
        conn.execute("NOTIFY fleet_runs")
        code = p.wait(timeout=30)
    assert (tmp_path / "err").read_text() == ""
    assert code == OUTPUT_GONE
    run = conn.execute("SELECT status::text AS status, failures FROM fleet.job_runs").fetchone()
    assert run == {"status": "done", "failures": 0}
    assert conn.execute("SELECT id FROM fleet.processes").fetchall() == []


def test_an_alert_process_whose_reader_went_away_stops_cleanly(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    argv = fleetctl_cmd("alert", "--poll", "0.5")
    with piped(argv, env_for(db_url), tmp_path / "err") as p:
        assert first_line(p.stdout)["event"] == "alert_started"
        assert p.stdout is not None
        p.stdout.close()  # its next line (`alert_no_routes`) finds no reader
        code = p.wait(timeout=20)
    assert (tmp_path / "err").read_text() == ""
    assert code == OUTPUT_GONE
