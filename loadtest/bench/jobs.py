"""The jobs fleet workers run in the benchmark (`fleet-worker --app loadtest.bench.jobs`)."""

from __future__ import annotations

import fleet
from fleet import JobContext
from loadtest.bench import stamps


@fleet.job("bench.noop")
def noop(ctx: JobContext) -> None:
    """Does nothing: a run's cost is fleet's own."""


@fleet.job("bench.stamp")
def stamp(ctx: JobContext) -> None:
    """Records when it started, against its slot (lag)."""
    stamps.record(ctx.slot.timestamp(), ctx.schedule)


@fleet.job("bench.sleep")
def sleep(ctx: JobContext) -> None:
    """Sleeps args.seconds, stopping early when cancelled (the reclaim test kills its worker)."""
    ctx.wait(float(ctx.args.get("seconds", 1.0)))
