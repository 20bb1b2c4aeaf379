"""Running fleetctl in-process against a test database, and building runs row by row."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.ops.cli import main
from tests.support import apply_text

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def hourly(conn: psycopg.Connection[Any], *names: str) -> None:
    """Hourly schedules of the given names, running the job `noop`, overlap allowed."""
    apply_text(
        conn,
        "".join(
            f'[[schedule]]\nname = "{n}"\nevery = "1h"\njob = "noop"\noverlap = "allow"\n' for n in names
        ),
    )


def samples(text: str) -> Samples:
    """Every sample of a scrape, by name and labels, read with the Prometheus text parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scrape: Samples, name: str, **labels: str) -> float:
    return scrape[(name, tuple(sorted(labels.items())))]


def fleetctl(capsys: pytest.CaptureFixture[str], db_url: str, *args: str) -> tuple[int, str, str]:
    """Run `fleetctl ARGS` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        code = main(["--database-url", db_url, *args])
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def fleetctl_json(capsys: pytest.CaptureFixture[str], db_url: str, *args: str) -> tuple[int, Any]:
    code, out, err = fleetctl(capsys, db_url, *args, "--json")
    assert code in (0, 1), err
    return code, orjson.loads(out)


def add_run(
    conn: psycopg.Connection[Any],
    name: str,
    slot: datetime,
    status: str = "done",
    *,
    job: str = "noop",
    overlap: str = "allow",
    attempts: int = 1,
    finished: str | None = "now()",
    run_after: str = "now()",
    outcome: str | None = None,
    error: str | None = None,
    history: bool = True,
) -> None:
    """A run in any state; `finished` and `run_after` are SQL expressions; with `history`, one
    ended attempt row per attempt."""
    finished_sql = finished if status in ("done", "dead", "skipped") and finished else "NULL"
    conn.execute(
        f"INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, status, attempts, failures,"
        f" run_after, started_at, finished_at, last_outcome, last_error) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s, {run_after}, CASE WHEN %s > 0 THEN {run_after} END, "
        f" {finished_sql}, %s, %s)",
        (
            name,
            slot,
            job,
            overlap,
            status,
            attempts,
            attempts if status == "dead" else 0,
            attempts,
            outcome or (status if status in ("done", "dead") else None),
            error,
        ),
    )
    if history:
        for n in range(1, attempts + 1):
            conn.execute(
                "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, host, pid,"
                " started_at, finished_at, outcome, error, trace_id) "
                "VALUES (%s, %s, %s, %s, 'h', 1, now(), now(), %s, %s, %s)",
                (
                    name,
                    slot,
                    n,
                    f"w{n}",
                    "done" if n == attempts and status == "done" else "failed",
                    None if status == "done" and n == attempts else f"boom {n}",
                    f"{n:032x}",
                ),
            )


def snapshot(conn: psycopg.Connection[Any]) -> list[Any]:
    """Everything an operator command could change, to check that a refused one changed nothing."""
    return [
        conn.execute("SELECT * FROM fleet.schedules ORDER BY name").fetchall(),
        conn.execute("SELECT * FROM fleet.job_runs ORDER BY schedule_name, scheduled_for").fetchall(),
        conn.execute(
            "SELECT * FROM fleet.job_attempts ORDER BY schedule_name, scheduled_for, attempt"
        ).fetchall(),
    ]
