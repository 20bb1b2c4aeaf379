"""A job whose schedules are declared in code: one on the job, one at module level."""

from __future__ import annotations

from fleet_test_events import record as _record

import fleet
from fleet import JobContext


@fleet.job("declared.tick", schedule=fleet.Every("5m", args={"region": "eu"}))
def tick(ctx: JobContext) -> None:
    _record("done", ctx)


nightly = fleet.Cron("0 2 * * *", name="declared-nightly", job="declared.tick")
