"""The context a handler receives carries its attempt's values, and follows its lease."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from fleet.worker.attempt import Attempt

SLOT = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)


def test_the_context_carries_each_value_of_its_attempt() -> None:
    a = Attempt(
        schedule="nightly-report",
        slot=SLOT,
        job="reports.nightly",
        args={"format": "pdf"},
        attempt=3,
        failures=2,
        timeout=None,
        max_attempts=6,
        retry_base=timedelta(seconds=30),
        retry_cap=timedelta(minutes=15),
        started_at=SLOT,
    )
    ctx = a.context("worker-7")
    assert (ctx.schedule, ctx.slot, ctx.attempt, ctx.args, ctx.worker_id, ctx.job) == (
        "nightly-report",
        SLOT,
        3,
        {"format": "pdf"},
        "worker-7",
        "reports.nightly",
    )
    assert ctx.idempotency_key == "nightly-report:2026-11-02T01:00:00Z"
    assert ctx.cancel_event is a.cancel and not ctx.cancelled
    assert a.lease_deadline_mono == math.inf and ctx.lease_deadline() == math.inf
    a.lease_deadline_mono = 0.0  # a lease that ran out locally: seen through the context at once
    assert ctx.lease_deadline() == 0.0 and ctx.cancelled and a.cancel.is_set()
