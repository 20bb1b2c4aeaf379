"""The README's first application runs as written: its `billing.py`, taken from the README itself,
applied with `fleetctl apply --app billing` and run by a `fleet-worker --app billing`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from tests.support import FAST, ROOT, Proc, env_for, fleetctl_cmd, processes, scalar, wait_for, worker_cmd


def readme_app() -> str:
    section = (ROOT / "README.md").read_text().split("## A first application", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the README's first application has no Python block"
    return found.group(1)


def test_the_readmes_first_application_runs_as_written(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    (tmp_path / "billing.py").write_text(readme_app())
    env = env_for(db_url)
    env["PYTHONPATH"] = str(tmp_path)

    def fleetctl(*args: str) -> str:
        done = subprocess.run(
            fleetctl_cmd(*args), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    fleetctl("apply", "--app", "billing")
    assert scalar(conn, "SELECT string_agg(name || '=' || job, ' ' ORDER BY name) FROM fleet.schedules") == (
        "invoices=billing.send_invoices rates=billing.refresh_rates"
    )
    fleetctl("trigger", "invoices")
    fleetctl("trigger", "rates")
    with processes() as procs:
        worker = Proc(worker_cmd("--app", "billing", *FAST), env, tmp_path / "worker.log")
        procs.append(worker)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 2,
            timeout=30,
            what="both runs done",
        )
        outcomes = conn.execute(
            "SELECT schedule_name, attempts, last_outcome FROM fleet.job_runs ORDER BY schedule_name"
        ).fetchall()
        assert [(r["schedule_name"], r["attempts"], r["last_outcome"]) for r in outcomes] == [
            ("invoices", 1, "done"),
            ("rates", 1, "done"),
        ]
        assert re.search(r"invoices sent for eu \(invoices:\d{4}-\d\d-\d\dT[\d:]+Z\)", worker.output())
