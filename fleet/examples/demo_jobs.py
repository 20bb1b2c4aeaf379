"""Demo jobs for the example schedules: quick ones, a flaky one that retries, a slow one that cooperates.

`fleetctl up` runs its workers with `--app fleet.examples.demo_jobs` unless told otherwise.
"""

from __future__ import annotations

import hashlib
import random

import fleet
from fleet import JobContext


@fleet.job("demo.ping")
def ping(ctx: JobContext) -> None:
    """Returns at once: the quickest possible run."""


@fleet.job("demo.resize")
def resize(ctx: JobContext) -> None:
    """Takes a second or two, noticing a cancellation (shutdown, lost lease) while it waits."""
    ctx.wait(random.uniform(0.5, float(ctx.args.get("max_seconds", 2.0))))
    ctx.check()


@fleet.job("demo.flaky")
def flaky(ctx: JobContext) -> None:
    """Fails the first attempt of about a third of its slots; the retry succeeds."""
    digest = hashlib.sha256(ctx.idempotency_key.encode()).digest()
    if ctx.attempt == 1 and digest[0] % 3 == 0:
        raise RuntimeError("the upstream API answered 503 (demo): this attempt will be retried")


@fleet.job("demo.report")
def report(ctx: JobContext) -> None:
    """A cron job; its idempotency key names the slot, the same on every attempt."""
    ctx.wait(0.3)
    ctx.check()
