"""Claiming due runs under a lease: one statement for a whole batch."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from fleet.queries import q
from worker.attempt import HOST, Attempt


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
    }


def claim_result(
    rows: list[dict[str, Any]], lease_s: float, sent_mono: float
) -> tuple[list[Attempt], list[dict[str, Any]]]:
    """Split the claim's rows into attempts to run and runs recorded as skipped for overlap."""
    attempts = [Attempt.from_row(r, lease_s, sent_mono) for r in rows if r["skipped_reason"] is None]
    skipped = [r for r in rows if r["skipped_reason"] is not None]
    return attempts, skipped


def run_claim(
    conn: psycopg.Connection[Any],
    *,
    worker_id: str,
    jobs: Sequence[str],
    limit: int,
    lease_s: float,
    now: datetime | None = None,
) -> tuple[list[Attempt], list[dict[str, Any]]]:
    """Claim up to `limit` claimable runs of `jobs`; returns (attempts, runs skipped for overlap).

    Claimable: pending and due, or running with an expired lease. Concurrent claimers skip each
    other's rows (SKIP LOCKED) and never wait on them. Each claim increments `attempts`, the
    fencing token every later write of the attempt is conditioned on.
    """
    sent = time.monotonic()
    params = claim_params(worker_id=worker_id, jobs=jobs, limit=limit, lease_s=lease_s, now=now)
    return claim_result(conn.execute(q("run_claim"), params).fetchall(), lease_s, sent)
