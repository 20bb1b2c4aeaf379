"""Jobs the tests run; each records what it did in $FLEET_TEST_DIR/events.log (one line per event)."""

from __future__ import annotations

import sys
import time

from fleet_test_events import record as _record

import fleet
from fleet import JobContext


@fleet.job("noop")
def noop(ctx: JobContext) -> None:
    _record("done", ctx)


@fleet.job("sleep")
def sleep(ctx: JobContext) -> None:
    """Sleeps args.seconds, cooperatively: a cancelled attempt stops at once."""
    _record("start", ctx)
    if ctx.wait(float(ctx.args.get("seconds", 1))):
        _record("cancelled", ctx)
        ctx.check()
    _record("done", ctx)


@fleet.job("stubborn")
def stubborn(ctx: JobContext) -> None:
    """Attempt 1 sleeps args.seconds and does not look at cancellation; later attempts sleep
    args.later seconds cooperatively."""
    _record("start", ctx)
    if ctx.attempt == 1:
        time.sleep(float(ctx.args.get("seconds", 1)))
    elif ctx.wait(float(ctx.args.get("later", 1))):
        _record("cancelled", ctx)
        ctx.check()
    _record("done", ctx)


@fleet.job("fail")
def fail(ctx: JobContext) -> None:
    _record("start", ctx)
    raise RuntimeError("always fails")


@fleet.job("permanent")
def permanent(ctx: JobContext) -> None:
    _record("start", ctx)
    raise fleet.Permanent("cannot succeed")


@fleet.job("flaky")
def flaky(ctx: JobContext) -> None:
    """Fails its first args.fail_times attempts, then succeeds."""
    _record("start", ctx)
    if ctx.attempt <= int(ctx.args.get("fail_times", 1)):
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")
    _record("done", ctx)


@fleet.job("traced")
def traced(ctx: JobContext) -> None:
    """Annotates its attempt's span and makes a child span, through the plain OpenTelemetry API."""
    from opentelemetry import trace

    trace.get_current_span().set_attribute("app.note", "set by the handler")
    with trace.get_tracer("fleet-test-jobs").start_as_current_span("render report") as span:
        span.set_attribute("app.pages", 3)
    _record("done", ctx)


@fleet.job("permanent_once")
def permanent_once(ctx: JobContext) -> None:
    """Its first attempt fails permanently with args.error (a dead run); a retry succeeds."""
    _record("start", ctx)
    if ctx.attempt == 1:
        raise fleet.Permanent(str(ctx.args.get("error", "cannot succeed")))
    _record("done", ctx)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for this exception")


@fleet.job("exits")
def exits(ctx: JobContext) -> None:
    """Ends the way a script does: sys.exit(3)."""
    _record("start", ctx)
    sys.exit(3)


@fleet.job("interrupted")
def interrupted(ctx: JobContext) -> None:
    _record("start", ctx)
    raise KeyboardInterrupt


@fleet.job("unprintable")
def unprintable(ctx: JobContext) -> None:
    """Raises an exception whose __str__ itself raises."""
    _record("start", ctx)
    raise Unprintable
