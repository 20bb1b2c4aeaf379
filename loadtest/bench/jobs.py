"""The jobs fleet workers run in the benchmark (`fleet-worker --app loadtest.bench.jobs`)."""

from __future__ import annotations

import asyncio

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


@fleet.job("bench.async_sleep")
async def async_sleep(ctx: JobContext) -> None:
    """Awaits asyncio.sleep(args.seconds) on the worker's event loop."""
    await asyncio.sleep(float(ctx.args.get("seconds", 1.0)))
