"""The README's first application runs as written: its `billing.py`, taken from the README itself,
applied with `fleetctl apply --app billing`, run by a `fleet-ticker` and a `fleet-worker --app billing`
with their default settings: the worker prints within seconds, and the README's trigger with args
runs the invoices for that region."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support import (
    ROOT,
    Proc,
    env_for,
    fleetctl_cmd,
    processes,
    scalar,
    ticker_cmd,
    wait_for,
    worker_cmd,
)


def readme_section() -> str:
    return (ROOT / "README.md").read_text().split("## A first application", 1)[1].split("\n## ", 1)[0]


def readme_app() -> str:
    found = re.search(r"```python\n(.*?)```", readme_section(), re.S)
    assert found, "the README's first application has no Python block"
    return found.group(1)


def readme_trigger() -> list[str]:
    """The README's `fleetctl trigger ...` command line, its arguments (the comment left out)."""
    found = re.search(r"^fleetctl (trigger .*)$", readme_section(), re.M)
    assert found, "the README's first application triggers nothing"
    return shlex.split(found.group(1), comments=True)


def test_the_readmes_first_application_prints_within_seconds_and_uses_triggered_args(
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
    with processes() as procs:
        procs.append(Proc(ticker_cmd(), env, tmp_path / "ticker.log"))
        worker = Proc(worker_cmd("--app", "billing"), env, tmp_path / "worker.log")
        started = time.monotonic()
        procs.append(worker)
        wait_for(lambda: "rates refreshed for " in worker.output(), timeout=10, what="the rates line")
        printed_after = time.monotonic() - started
        assert re.search(r"^rates refreshed for \d\d:\d\d:\d\d$", worker.output(), re.M), worker.output()

        args = readme_trigger()
        assert args[:2] == ["trigger", "invoices"] and "--args" in args, args
        fleetctl(*args)
        wait_for(lambda: "invoices sent for " in worker.output(), timeout=10, what="the invoices line")
        sent = re.findall(r"^invoices sent for (\w+) \((invoices:[\dT:-]+Z)\)$", worker.output(), re.M)
        assert [region for region, _ in sent] == ["us"], worker.output()
        wait_for(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(*) FROM fleet.job_runs WHERE schedule_name = 'invoices' AND status = 'done'",
                )
                == 1
            ),
            what="the invoices run done",
        )
    print(f"README app: first line {printed_after:.1f}s after the worker started")
