"""Deciding an attempt's outcome (retry, dead, done) and recording outcomes, fenced, in one statement."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psycopg

from fleet.backoff import backoff_delay
from fleet.queries import q
from worker.attempt import HOST, Attempt, Outcome


def decide(
    attempt: Attempt, verdict: str, error: str | None, rand: Callable[[], float] = random.random
) -> Outcome:
    """The outcome of an attempt whose handler returned `verdict` (done/permanent/failed/timeout)."""
    if verdict == "done":
        return Outcome("done", "done")
    if verdict == "permanent":
        return Outcome("dead", "dead", error, spent=1)
    failures = attempt.failures + 1
    if failures >= attempt.max_attempts:
        return Outcome("dead", "dead", f"{error} (attempt budget of {attempt.max_attempts} spent)", spent=1)
    delay = backoff_delay(
        failures, attempt.retry_base.total_seconds(), attempt.retry_cap.total_seconds(), rand
    )
    return Outcome("pending", "timeout" if verdict == "timeout" else "failed", error, delay_s=delay, spent=1)


def handed_back() -> Outcome:
    """A run given back on shutdown: claimable again at once, no retry budget spent."""
    return Outcome("pending", "handed_back", "handed back: the worker was stopping")


def finish_params(
    finished: Sequence[tuple[Attempt, Outcome]], *, worker_id: str, now: datetime | None = None
) -> dict[str, Any]:
    """The parameters of the `run_finish` statement for a batch of outcomes."""
    return {
        "now": now,
        "names": [a.schedule for a, _ in finished],
        "slots": [a.slot for a, _ in finished],
        "attempts": [a.attempt for a, _ in finished],
        "statuses": [o.status for _, o in finished],
        "outcomes": [o.outcome for _, o in finished],
        "errors": [o.error for _, o in finished],
        "delays": [o.delay_s for _, o in finished],
        "spent": [o.spent for _, o in finished],
        "worker": worker_id,
        "host": HOST,
        "pid": os.getpid(),
    }


def finish_result(rows: list[dict[str, Any]]) -> set[tuple[str, datetime]]:
    """The keys the finish statement wrote."""
    return {(r["schedule_name"], r["scheduled_for"]) for r in rows}


def run_finish(
    conn: psycopg.Connection[Any],
    finished: Sequence[tuple[Attempt, Outcome]],
    *,
    worker_id: str,
    now: datetime | None = None,
) -> set[tuple[str, datetime]]:
    """Record outcomes and their attempt history rows; returns the keys actually written (others
    were fenced out: their attempt number is no longer the run's)."""
    if not finished:
        return set()
    params = finish_params(finished, worker_id=worker_id, now=now)
    return finish_result(conn.execute(q("run_finish"), params).fetchall())
