"""A ticker that dies is an alert within a minute: a real `fleet-ticker` is killed with SIGKILL (no
clean stop removes its row), and `fleetctl status`, as a monitoring system runs it, turns from exit 0
to exit 1 with NO-TICKER once the ticker's row is older than the staleness limit (60 s)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg

from fleet.store.registry import STALE_AFTER_S
from tests.support import Proc, apply_text, env_for, fleetctl_cmd, processes, scalar, ticker_cmd, wait_for


def status(db_url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        fleetctl_cmd("status", *flags),
        env=env_for(db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done
    return done


def test_a_killed_ticker_makes_status_fail_within_a_minute(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # an hourly schedule whose first slot is far ahead: OK while a ticker lives, whatever else runs
    apply_text(
        conn, '[[schedule]]\nname = "hourly"\nevery = "1h"\njob = "noop"\nstart_at = "2099-01-01T00:00:00Z"\n'
    )
    with processes() as procs:
        t = Proc(ticker_cmd("--poll", "0.5", "--id", "t1"), env_for(db_url), tmp_path / "ticker.log")
        procs.append(t)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.processes WHERE kind = 'ticker'") == 1,
            timeout=20,
            what="the ticker to register",
        )
        ok = status(db_url)
        assert ok.returncode == 0 and ok.stdout.startswith("SCHEDULE"), ok
        assert orjson.loads(status(db_url, "--json").stdout)[0]["verdict"] == "OK"

        t.signal(signal.SIGKILL)
        assert t.wait(10) == -signal.SIGKILL
        killed = time.monotonic()
        # the row stays (nothing removed it): the ticker is gone once it is older than the limit
        assert scalar(conn, "SELECT count(*) FROM fleet.processes WHERE id = 't1'") == 1

        def failing() -> subprocess.CompletedProcess[str] | None:
            done = status(db_url)
            return done if done.returncode == 1 else None

        failed = wait_for(
            failing, timeout=STALE_AFTER_S + 15, interval=1.0, what="status to report NO-TICKER"
        )
        took = time.monotonic() - killed
    assert failed is not None
    first = failed.stdout.splitlines()[0]
    assert first.startswith("fleet: NO-TICKER: no ticker seen for ") and "(last: t1 on " in first, (
        failed.stdout
    )
    assert STALE_AFTER_S - 10 < took < STALE_AFTER_S + 15, took  # not before the limit, soon after it
    payload = orjson.loads(status(db_url, "--json").stdout)
    assert [(s["name"], s["verdict"], s["healthy"]) for s in payload] == [("hourly", "NO-TICKER", False)]
