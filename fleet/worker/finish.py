"""Deciding an attempt's outcome (retry, dead, done) and recording outcomes, fenced, in one statement."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from fleet.store.queries import q
from fleet.timing.backoff import backoff_delay
from fleet.worker.attempt import HOST, Attempt, Outcome

DONE = Outcome("done", "done")  # the outcome of nearly every attempt, shared (outcomes are not changed)


def decide(
    attempt: Attempt, verdict: str, error: str | None, rand: Callable[[], float] = random.random
) -> Outcome:
    """The outcome of an attempt whose handler returned `verdict` (done/permanent/failed/timeout)."""
    if verdict == "done":
        return DONE
    if verdict == "permanent":
        return Outcome("dead", "dead", error, spent=1)
    failures = attempt.failures + 1
    if failures >= attempt.max_attempts:
        return Outcome("dead", "dead", f"{error} (attempt budget of {attempt.max_attempts} spent)", spent=1)
    delay = backoff_delay(
        failures, attempt.retry_base.total_seconds(), attempt.retry_cap.total_seconds(), rand
    )
    return Outcome("pending", "timeout" if verdict == "timeout" else "failed", error, delay_s=delay, spent=1)


def handed_back(why: str = "the worker was stopping") -> Outcome:
    """A run given back unfinished (on shutdown): claimable again at once, no retry budget spent."""
    return Outcome("pending", "handed_back", f"handed back: {why}")


def _plain_done(o: Outcome) -> bool:
    return o is DONE or (
        o.status == "done" and o.outcome == "done" and o.error is None and o.spent == 0 and o.result is None
    )


def finish_params(
    done: Sequence[tuple[Attempt, Outcome]],
    rest: Sequence[tuple[Attempt, Outcome]],
    *,
    worker_id: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The parameters of the `run_finish` statement: plain successes (`done`, nearly every outcome)
    travel as keys only, the `rest` in full; the statement numbers the rows it wrote by their place
    in `done + rest` (from 1)."""
    return {
        "now": now,
        "done_names": [a.schedule for a, _ in done],
        "done_slots": [a.slot for a, _ in done],
        "done_attempts": [a.attempt for a, _ in done],
        "names": [a.schedule for a, _ in rest],
        "slots": [a.slot for a, _ in rest],
        "attempts": [a.attempt for a, _ in rest],
        "statuses": [o.status for _, o in rest],
        "outcomes": [o.outcome for _, o in rest],
        "errors": [o.error for _, o in rest],
        "delays": [o.delay_s for _, o in rest],
        "spent": [o.spent for _, o in rest],
        "results": [None if o.result is None else o.result.decode() for _, o in rest],
        "worker": worker_id,
        "host": HOST,
        "pid": os.getpid(),
    }


def finish_result(rows: Sequence[Sequence[Any]]) -> set[int]:
    """The places in the batch (from 1) of the outcomes the finish statement wrote."""
    return {r[0] for r in rows}


def send_finish(
    conn: psycopg.Connection[Any],
    finished: Sequence[tuple[Attempt, Outcome]],
    *,
    worker_id: str,
    now: datetime | None = None,
) -> tuple[list[tuple[Attempt, Outcome]], psycopg.Cursor[tuple[Any, ...]]]:
    """Execute `run_finish` (in a pipeline, its rows come later). Returns the batch in the order
    sent, plain successes first, which `finish_result`'s places refer to, and the cursor."""
    done: list[tuple[Attempt, Outcome]] = []
    rest: list[tuple[Attempt, Outcome]] = []
    for f in finished:
        (done if _plain_done(f[1]) else rest).append(f)
    cur = conn.cursor(row_factory=tuple_row, binary=True)
    cur.execute(q("run_finish"), finish_params(done, rest, worker_id=worker_id, now=now))
    return done + rest, cur


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
    ordered, cur = send_finish(conn, finished, worker_id=worker_id, now=now)
    return {ordered[i - 1][0].key for i in finish_result(cur.fetchall())}
