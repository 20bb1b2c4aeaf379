"""The async job of the benchmark's async section (`fleet-worker --app loadtest.bench.async_jobs`),
apart from the other jobs so that the drain's workers stay sync-only, as they were measured before."""

from __future__ import annotations

import asyncio

import fleet
from fleet import JobContext


@fleet.job("bench.async_sleep")
async def async_sleep(ctx: JobContext) -> None:
    """Awaits asyncio.sleep(args.seconds) on the worker's event loop."""
    await asyncio.sleep(float(ctx.args.get("seconds", 1.0)))
