"""Claiming due runs under a lease: one statement for a whole batch."""

from __future__ import annotations

import functools
import operator
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg

from fleet.observe import telemetry
from fleet.store.queries import q
from fleet.worker.attempt import CLAIM_COLUMNS, HOST, Attempt, trusted_for

# Random bytes per claimable run: its attempt's trace id (16) and span id (8).
ID_BYTES = 24
# The error recorded on a run skipped by its schedule's overlap policy.
OVERLAP_SKIPPED = "overlap: an earlier run of this schedule was still in progress"


class Skipped(NamedTuple):
    """A fresh run the claim recorded as skipped: an earlier run of its schedule still held it."""

    schedule: str
    slot: datetime


def claim_params(
    *, worker_id: str, jobs: Sequence[str], limit: int, lease_s: float, now: datetime | None = None
) -> dict[str, Any]:
    """The parameters of the `run_claim` statement."""
    return {
        "now": now,
        "jobs": list(jobs),
        "limit": limit,
        "lease_s": lease_s,
        "worker": worker_id,
        "host": HOST,
        "pid": os.getpid(),
        "ids": os.urandom(ID_BYTES * limit),
        # the ids are made whether or not a span is exported under them: record which
        "traced": telemetry.enabled(),
        "overlap_error": OVERLAP_SKIPPED,
    }


def claim_rows(
    lease_s: float, sent_mono: float
) -> Callable[[Any], Callable[[Sequence[Any]], Attempt | Skipped]]:
    """A psycopg row factory turning the claim's rows straight into attempts (or skipped runs)."""

    def factory(cursor: Any) -> Callable[[Sequence[Any]], Attempt | Skipped]:
        res = cursor.pgresult
        take, reason, schedule, slot = _positions(tuple(res.fname(i) for i in range(res.nfields)))
        from_values = Attempt.from_values
        trust_s = trusted_for(lease_s)

        def make(values: Sequence[Any]) -> Attempt | Skipped:
            if values[reason] is not None:
                return Skipped(values[schedule], values[slot].astimezone(UTC))
            return from_values(take(values), trust_s, sent_mono)

        return make

    return factory


@functools.cache
def _positions(names: tuple[bytes, ...]) -> tuple[Callable[[Sequence[Any]], tuple[Any, ...]], int, int, int]:
    """For the claim's column names: a getter of the attempt's values in the order of CLAIM_COLUMNS,
    and the places of skipped_reason, schedule_name and scheduled_for."""
    place = {n.decode(): i for i, n in enumerate(names)}
    take = operator.itemgetter(*(place[c] for c in CLAIM_COLUMNS))
    return take, place["skipped_reason"], place["schedule_name"], place["scheduled_for"]


def claim_result(rows: Sequence[Attempt | Skipped]) -> tuple[list[Attempt], list[Skipped]]:
    """Split the claim's rows into attempts to run and runs recorded as skipped for overlap."""
    attempts = [r for r in rows if isinstance(r, Attempt)]
    if len(attempts) == len(rows):
        return attempts, []
    return attempts, [r for r in rows if isinstance(r, Skipped)]


def send_claim(
    conn: psycopg.Connection[Any],
    *,
    worker_id: str,
    jobs: Sequence[str],
    limit: int,
    lease_s: float,
    now: datetime | None = None,
) -> psycopg.Cursor[Attempt | Skipped]:
    """Execute `run_claim` (in a pipeline, its rows come later); the cursor's rows are attempts and
    runs skipped for overlap."""
    cur = conn.cursor(row_factory=claim_rows(lease_s, time.monotonic()), binary=True)
    cur.execute(
        q("run_claim"), claim_params(worker_id=worker_id, jobs=jobs, limit=limit, lease_s=lease_s, now=now)
    )
    return cur


def run_claim(
    conn: psycopg.Connection[Any],
    *,
    worker_id: str,
    jobs: Sequence[str],
    limit: int,
    lease_s: float,
    now: datetime | None = None,
) -> tuple[list[Attempt], list[Skipped]]:
    """Claim up to `limit` claimable runs of `jobs`; returns (attempts, runs skipped for overlap).

    Claimable: pending and due, or running with an expired lease. Concurrent claimers skip each
    other's rows (SKIP LOCKED) and never wait on them. Each claim increments `attempts`, the
    fencing token every later write of the attempt is conditioned on.
    """
    cur = send_claim(conn, worker_id=worker_id, jobs=jobs, limit=limit, lease_s=lease_s, now=now)
    return claim_result(cur.fetchall())
