"""An application's own modules may be called `worker`, `ops`, `ticker` or `loadtest`: fleet installs
only `fleet`, so they are served (`fleet-worker --app worker` runs their jobs) and managed
(`fleetctl apply`, `status`) from their directory like any other."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from tests.support import fleetctl_cmd, live_ticker, ticker_cmd, worker_cmd

NAMES = ("worker", "ops", "ticker", "loadtest")
JOB_MODULE = """import pathlib

import fleet


@fleet.job("app.{name}")
def run(ctx: fleet.JobContext) -> None:
    # Which file answered to the name `{name}`: this application's, not a module of fleet's.
    pathlib.Path("{name}.ran").write_text(__file__)
"""


def app_env(db_url: str, app: Path) -> dict[str, str]:
    """Only the application's directory on PYTHONPATH (nothing of the repository's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_", "PYTHON"))}
    env.update(FLEET_DATABASE_URL=db_url, OTEL_TRACES_EXPORTER="none", PYTHONPATH=str(app))
    return env


def test_an_app_with_modules_named_like_fleets_roles_is_served_and_managed(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    schedules = ""
    for name in NAMES:
        (app / f"{name}.py").write_text(JOB_MODULE.format(name=name))
        # Started long ago: the latest missed slot (one run) is due now.
        schedules += (
            f'[[schedule]]\nname = "{name}-job"\nevery = "1h"\njob = "app.{name}"\n'
            'start_at = "2020-01-01T00:00:00Z"\ncatchup = "latest"\n'
        )
    (app / "schedules.toml").write_text(schedules)
    env = app_env(db_url, app)

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=app, env=env, capture_output=True, text=True, timeout=120)

    applied = run(fleetctl_cmd("apply", "schedules.toml"))
    assert applied.returncode == 0 and "created: " in applied.stdout, applied
    ticked = run(ticker_cmd("--until-idle", "--lookahead", "0"))  # not the next hour's slot, however near
    assert ticked.returncode == 0, ticked
    assert conn.execute("SELECT count(*) AS n FROM fleet.job_runs").fetchone() == {"n": len(NAMES)}
    apps = [flag for name in NAMES for flag in ("--app", name)]
    served = run(worker_cmd(*apps, "--until-idle", "--poll", "0.5"))
    assert served.returncode == 0, served
    done = conn.execute("SELECT job FROM fleet.job_runs WHERE status = 'done' ORDER BY job").fetchall()
    assert [r["job"] for r in done] == sorted(f"app.{name}" for name in NAMES)
    for name in NAMES:
        assert (app / f"{name}.ran").read_text() == str(app / f"{name}.py")
    live_ticker(conn)  # the ticker ran until idle and left; a running fleet keeps one
    status = run(fleetctl_cmd("status", "--json"))
    assert status.returncode == 0, status
    verdicts = {s["name"]: s["verdict"] for s in json.loads(status.stdout)}
    assert verdicts == {f"{name}-job": "OK" for name in NAMES}, verdicts
