"""`async def` jobs the tests run (a worker importing only these has no handler threads), and a sync
job that hands back a coroutine; each records what it did like fleet_test_jobs."""

from __future__ import annotations

import asyncio
import time

from fleet_test_events import record as _record

import fleet
from fleet import JobContext


@fleet.job("async_sleep")
async def async_sleep(ctx: JobContext) -> None:
    """Sleeps args.seconds on the worker's event loop; a cancellation arrives as CancelledError."""
    _record("start", ctx)
    try:
        if args_flag(ctx, "ctx_sleep"):
            if await ctx.sleep(float(ctx.args.get("seconds", 1))):
                _record("cancelled", ctx)
                ctx.check()
        else:
            await asyncio.sleep(float(ctx.args.get("seconds", 1)))
    except asyncio.CancelledError:
        _record("cancelled", ctx)
        raise
    _record("done", ctx)


def args_flag(ctx: JobContext, name: str) -> bool:
    return bool(ctx.args.get(name, False))


@fleet.job("async_stubborn")
async def async_stubborn(ctx: JobContext) -> None:
    """Attempt 1 swallows every cancellation and sleeps on; later attempts finish at once."""
    _record("start", ctx)
    end = time.monotonic() + float(ctx.args.get("seconds", 30))
    while ctx.attempt == 1 and time.monotonic() < end:
        try:
            await asyncio.sleep(end - time.monotonic())
        except asyncio.CancelledError:
            _record("ignored", ctx)
    _record("done", ctx)


@fleet.job("returns_coroutine")
def returns_coroutine(ctx: JobContext) -> object:
    """A sync function handing back a coroutine nobody awaits."""
    _record("start", ctx)
    return asyncio.sleep(0)


@fleet.job("async_blocks")
async def async_blocks(ctx: JobContext) -> None:
    """Blocks the event loop: a synchronous sleep of args.seconds where an await belongs."""
    _record("start", ctx)
    time.sleep(float(ctx.args.get("seconds", 3)))  # the mistake the worker's loop watch notices
    _record("done", ctx)
