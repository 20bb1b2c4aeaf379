"""A scheduled fleet under test, shared by the herd and the sustained load: slot instants ahead of the
database's clock, a ticker and workers started and ready, and the slot-to-start lags of a window of
slots read from the database."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from fleet.store.db import connect
from loadtest.bench.config import WORKER_FLAGS, Bench
from loadtest.bench.procs import Proc, env_for, fleet_cmd
from loadtest.bench.server import wait_until

# How fast `apply` writes schedules and a ticker materialises slots, at the least, on a slow shared
# machine: the herd's instant is set far enough ahead for both to finish before it.
APPLY_PER_S = 5_000
MATERIALISE_PER_S = 3_000
START_S = 15.0  # a ticker and a few workers started, connected and listening


def whole_second_after(now: dt.datetime, lead_s: float) -> dt.datetime:
    """The first whole second at least `lead_s` after `now`."""
    t = now + dt.timedelta(seconds=lead_s)
    return t.replace(microsecond=0) + dt.timedelta(seconds=1 if t.microsecond else 0)


def whole_minute_after(now: dt.datetime, lead_s: float) -> dt.datetime:
    """The first whole minute at least `lead_s` after `now`."""
    t = whole_second_after(now, lead_s)
    return t.replace(second=0) + dt.timedelta(minutes=1 if t.second else 0)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def db_now(conn: psycopg.Connection[Any]) -> dt.datetime:
    row = conn.execute("SELECT clock_timestamp() AS now").fetchone()
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Fleet:
    ticker: Proc
    workers: list[Proc]

    @property
    def all(self) -> list[Proc]:
        return [self.ticker, *self.workers]


def start_fleet(bench: Bench, url: str, name: str, workers: int, **env: str) -> Fleet:
    """A fleet-ticker and `workers` fleet-workers (no-op jobs, the drain's flags), waited for until
    every one has registered and every worker listens. `env` is added to their environment."""
    environ = env_for(url, **env)
    ticker = bench.procs.start(fleet_cmd("fleet-ticker"), environ, bench.log(f"{name}-ticker"))
    fleet = Fleet(
        ticker,
        [
            bench.procs.start(
                fleet_cmd(
                    "fleet-worker", "--app", "loadtest.bench.jobs", "--id", f"{name}-{i}", *WORKER_FLAGS
                ),
                environ,
                bench.log(f"{name}-worker-{i}"),
            )
            for i in range(workers)
        ],
    )

    def ready() -> bool:
        with connect(url, "fleet-bench") as c:
            row = c.execute("SELECT count(*) AS n FROM fleet.processes").fetchone()
        return bool(row and row["n"] >= workers + 1) and bench.server.listeners(url) >= workers

    wait_until(ready, 60 + 2 * workers, "the ticker and workers to be ready", 0.2, bench.procs, fleet.all)
    return fleet


@dataclass(frozen=True)
class Starts:
    """First attempts of the runs of a window of slots."""

    runs: int  # runs created for slots in the window
    started: int  # of which a first attempt started
    p50_s: float  # first attempt's start (job_runs.started_at) minus the slot
    p99_s: float
    max_s: float
    last_start: dt.datetime | None
    first_created: dt.datetime | None
    last_created: dt.datetime | None
    created_before: int  # runs created before their slot's time


STARTS = """
WITH r AS (
    SELECT r.scheduled_for, r.created_at,
           coalesce(a.started_at, CASE WHEN r.attempts = 1 THEN r.started_at END) AS started_at
    FROM fleet.job_runs r
    LEFT JOIN fleet.job_attempts a
           ON a.schedule_name = r.schedule_name AND a.scheduled_for = r.scheduled_for AND a.attempt = 1
    WHERE r.scheduled_for >= %(first)s AND r.scheduled_for < %(end)s
)
SELECT count(*) AS runs, count(started_at) AS started,
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - scheduled_for)::float8) AS lags,
       max(extract(epoch FROM started_at - scheduled_for))::float8 AS max_lag,
       max(started_at) AS last_start, min(created_at) AS first_created, max(created_at) AS last_created,
       count(*) FILTER (WHERE created_at < scheduled_for) AS created_before
FROM r
"""


def starts(conn: psycopg.Connection[Any], first: dt.datetime, end: dt.datetime) -> Starts:
    """What became of the slots in [first, end): their runs, and when each first attempt started
    (from job_attempts, or the run itself while its first attempt has not finished)."""
    row = conn.execute(STARTS, {"first": first, "end": end}).fetchone()
    assert row is not None
    lags: Sequence[float | None] = row["lags"] or (None, None)
    return Starts(
        runs=int(row["runs"]),
        started=int(row["started"]),
        p50_s=_num(lags[0]),
        p99_s=_num(lags[1]),
        max_s=_num(row["max_lag"]),
        last_start=row["last_start"],
        first_created=row["first_created"],
        last_created=row["last_created"],
        created_before=int(row["created_before"]),
    )


def seconds(a: dt.datetime | None, b: dt.datetime) -> float:
    """a - b in seconds (NaN when there is no a)."""
    return (a - b).total_seconds() if a is not None else math.nan


def _num(v: float | None) -> float:
    return float(v) if v is not None else math.nan
