"""One claimed attempt of a run, and running its handler to an outcome."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from fleet.errors import Cancelled, Permanent
from fleet.jobs import CancelSignal, Handler, JobContext, idempotency_key
from fleet.observe import logs, telemetry
from fleet.store.db import describe
from fleet.timing.window import Window, result_json, window_of

# running: the handler runs and this worker owns the lease.
# recorded: the outcome is decided (finished, timed out, handed back); the thread may still run.
# fenced: the lease was lost; nothing about this attempt may be written any more.
State = Literal["running", "recorded", "fenced"]

HOST = socket.gethostname()

# The columns of `run_claim` an attempt is made of, in the order of Attempt's first fields.
CLAIM_COLUMNS = (
    "schedule_name",
    "scheduled_for",
    "job",
    "args",
    "attempts",
    "failures",
    "timeout",
    "max_attempts",
    "retry_base",
    "retry_cap",
    "started_at",
    "trace_id",
    "span_id",
    "created_trace_id",
    "created_span_id",
    "prev_status",
    "prev_trace_id",
    "prev_span_id",
    "prev_outcome",
    "prev_worker",
    "prev_started_at",
    "origin",
    "run_window",
)

# How a handler ended: "done" | "permanent" | "failed" | "cancelled" (or "timeout"), the error
# text, and the JSON of the value a successful handler returned (None for none).
Verdict = tuple[str, str | None, bytes | None]


# Why an attempt is given up when its lease ran out locally (LeaseWatch, or a handler that noticed).
LEASE_RAN_OUT = "lease expired: not renewed in time (the worker was paused or cut off from the database)"


def trusted_for(lease_s: float) -> float:
    """How long a worker trusts a lease after sending the statement that took or renewed it: the
    lease less a tenth (at most 2 s). The database lease runs from a moment after the send, and
    another worker may take the run over from its end; a worker cut off from the database, or
    paused, gives its attempts up before then, with time left for their handlers to notice."""
    return lease_s - min(lease_s / 10, 2.0)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended, as the finish statement records it."""

    status: Literal["done", "pending", "dead"]
    outcome: str  # done | failed | timeout | dead | handed_back
    error: str | None = None
    delay_s: float = 0.0
    spent: int = 0  # 1 when the attempt counts against the retry budget
    result: bytes | None = None  # a success's result, as JSON


@dataclass(slots=True)
class Attempt:
    """A run claimed by this worker (row values from the claim, local bookkeeping after)."""

    # The claim's columns, in the order of CLAIM_COLUMNS.
    schedule: str
    slot: datetime
    job: str
    args: dict[str, Any]
    attempt: int
    failures: int
    timeout: timedelta | None
    max_attempts: int
    retry_base: timedelta
    retry_cap: timedelta
    started_at: datetime  # the database's time at the claim
    trace_id: str | None = None
    span_id: str | None = None
    created_trace_id: str | None = None
    created_span_id: str | None = None
    prev_status: str | None = None
    prev_trace_id: str | None = None
    prev_span_id: str | None = None
    prev_outcome: str | None = None
    prev_worker: str | None = None
    prev_started_at: datetime | None = None
    origin: str = "schedule"
    run_window: dict[str, Any] | None = None  # what the run covers, as stored (fleet.timing.window)
    # Local bookkeeping.
    state: State = "running"
    cancel: CancelSignal = field(default_factory=CancelSignal)
    started_mono: float = field(default_factory=time.monotonic)
    lease_deadline_mono: float = math.inf  # set from the claim: trusted until then, locally
    verdict: Verdict = ("", None, None)  # set by the handler thread when it returns
    returned: bool = False  # the handler has returned (its verdict is set)
    span: Any = (
        None  # the attempt's open trace span (fleet.worker.spans), made by the first thread needing it
    )
    log_fields: logs.Fields | None = None  # the fields every log line of this attempt carries

    @classmethod
    def from_values(cls, values: tuple[Any, ...], trust_s: float, claimed_mono: float) -> Attempt:
        """An attempt from the claim's values in the order of CLAIM_COLUMNS; its lease is trusted for
        `trust_s` (see `trusted_for`) from `claimed_mono`, taken before the claim was sent."""
        a = cls(*values)
        a.slot = a.slot.astimezone(UTC)
        if a.args is None:
            a.args = {}
        a.lease_deadline_mono = claimed_mono + trust_s
        return a

    @property
    def key(self) -> tuple[str, datetime]:
        return (self.schedule, self.slot)

    @property
    def ident(self) -> tuple[str, datetime, int]:
        """The run and the attempt number: one attempt (a worker may hold two of one run at once)."""
        return (self.schedule, self.slot, self.attempt)

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.schedule, self.slot)

    @property
    def reclaimed(self) -> bool:
        return self.prev_status == "running"

    def deadline_mono(self) -> float | None:
        return self.started_mono + self.timeout.total_seconds() if self.timeout else None

    def context(self, worker_id: str, look: Look | None = None) -> JobContext:
        """The handler's context. Its window's previous success is looked up with `look` at the first
        read (fleet.worker.previous) unless the run's stored window names it already; without
        `look`, the window is the stored one."""
        stored = self.run_window
        known = look is None or (stored is not None and "previous_slot" in stored)
        # Positional (in JobContext's field order): made for every attempt, and keywords cost more.
        ctx = (JobContext if known else ReadOnFirstUse)(
            self.schedule,
            self.slot,
            self.attempt,
            self.args,
            worker_id,
            self.job,
            self.cancel,
            lambda: self.lease_deadline_mono,
            window_of(stored) if known else _UNREAD,
        )
        if look is not None and isinstance(ctx, ReadOnFirstUse):
            ctx._look = lambda: self._window_from(look)
        return ctx

    def _window_from(self, look: Look) -> Window:
        try:
            self.run_window = look(self)  # later contexts of this attempt read it from here
        except Exception as e:
            raise RuntimeError(f"ctx.window could not be read from the database: {describe(e)}") from e
        return window_of(self.run_window)


# Looks up the previous success of an attempt's window: the window as kept with the run.
Look = Callable[[Attempt], dict[str, Any]]
# The window of a context not read yet (compared by identity).
_UNREAD = Window()


class ReadOnFirstUse(JobContext):
    """A handler's context whose `window` is looked up when first read (then kept)."""

    _look: Callable[[], Window]

    @property
    def window(self) -> Window:
        w: Window = self.__dict__["_window"]
        if w is _UNREAD:
            w = self.__dict__["_window"] = self._look()
        return w

    @window.setter
    def window(self, value: Window) -> None:
        self.__dict__["_window"] = value


def execute(handler: Handler, ctx: JobContext) -> Verdict:
    """Run the handler; returns ("done"|"permanent"|"failed"|"cancelled", error text, result JSON).

    A value the handler returns is its run's result (`returned`): one that cannot be stored (not
    JSON, or larger than MAX_RESULT_BYTES) makes the attempt "permanent", since the same code
    would return it again.

    Every way a handler can end is an outcome: `sys.exit()`, `KeyboardInterrupt` or any other
    BaseException (uncaught, it would end the handler's thread and leave the run renewed forever),
    and an exception that cannot even be printed."""
    try:
        result = handler(ctx)
    except BaseException as e:  # noqa: BLE001 - any way a handler ends is the attempt's outcome
        _leave_if_forked(ctx, e)
        return _outcome_of(e, ctx, (Cancelled,))
    _leave_if_forked(ctx, None)
    if result is not None and inspect.isawaitable(result):
        return "failed", _not_run(result), None
    return returned(result)


async def execute_async(handler: Handler, ctx: JobContext) -> Verdict:
    """Run an `async def` handler to completion on the running event loop; the same outcomes as
    `execute`. Cancellation reaches the handler as `asyncio.CancelledError` and is "cancelled"."""
    try:
        result = handler(ctx)
        if inspect.isawaitable(result):
            result = await result
    except BaseException as e:  # noqa: BLE001 - any way a handler ends is the attempt's outcome
        _leave_if_forked(ctx, e)
        return _outcome_of(e, ctx, (Cancelled, asyncio.CancelledError))
    _leave_if_forked(ctx, None)
    return returned(result)


def returned(value: Any) -> Verdict:
    """The verdict of a handler that returned `value`: done with its JSON, or "permanent" with the
    reason (one line naming `result`) when it cannot be stored."""
    if value is None:
        return _DONE
    encoded, problem = result_json(value)
    if problem is not None:
        return "permanent", problem, None
    return "done", None, encoded


_DONE: Verdict = ("done", None, None)


def _outcome_of(e: BaseException, ctx: JobContext, cancelled: tuple[type[BaseException], ...]) -> Verdict:
    if isinstance(e, Permanent):
        _record_exception(e)
        return "permanent", error_text(e), None
    if isinstance(e, cancelled):
        return "cancelled", error_text(e), None
    _record_exception(e)
    if ctx.cancelled:
        return "cancelled", error_text(e), None
    return "failed", error_text(e), None


# The worker's process, once it serves (`serve_here`). A handler that forks returns twice: once in a
# copy of the worker that shares its database sessions, has none of its other threads, and may find
# their locks held for ever.
_worker_pid: int | None = None


def serve_here() -> None:
    """Make the calling process the worker: a copy of it forked by a handler ends as soon as the
    handler returns (or raises) in it."""
    global _worker_pid
    _worker_pid = os.getpid()


def _leave_if_forked(ctx: JobContext, e: BaseException | None) -> None:
    """In a copy of the worker forked by a handler, end the process at once with os._exit: none of
    the worker's code, finalizers or connections may run there. Its exit code is a script's: 0 when
    the handler returned, SystemExit's code, 1 for any other exception."""
    if _worker_pid is None or os.getpid() == _worker_pid:
        return
    code = 1
    if e is None:
        code = 0
    elif isinstance(e, SystemExit):
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    with contextlib.suppress(Exception):
        os.write(
            2,
            f"fleet-worker: job {ctx.job!r}: a process forked by the handler came back from it;"
            f" it exits with code {code}\n".encode(errors="replace"),
        )
    os._exit(code)


def _not_run(result: object) -> str:
    """The error of a sync handler that returned an awaitable: nothing awaited it, so its work was
    not done; a coroutine is closed (no "never awaited" warning later)."""
    if inspect.iscoroutine(result):
        result.close()
    return (
        f"the handler returned {_type_name(result)}, an awaitable that a handler thread cannot run: "
        "declare the job's function with `async def` so that the worker awaits it on its event loop "
        "(a decorator's wrapper too)"
    )


def _record_exception(e: BaseException) -> None:
    # Recording reads str(e), which may itself raise: the outcome must not depend on it.
    with contextlib.suppress(Exception):
        telemetry.record_exception(e)


def _type_name(x: object) -> str:
    return getattr(type(x), "__name__", None) or "an object of unknown type"


def error_text(e: BaseException) -> str:
    """`Type: message (at file:line)`; an exception whose message cannot be made (its `__str__`
    raises) is named by its type."""
    try:
        message = str(e)
    except Exception as inner:  # noqa: BLE001 - the handler's exception class is at fault, not the run
        message = f"<unprintable: str() raised {_type_name(inner)}>"
    text = f"{_type_name(e)}: {message}" if message else _type_name(e)
    try:
        tb = traceback.extract_tb(e.__traceback__)
    except Exception:  # noqa: BLE001 - a location is a nicety
        tb = None
    if tb:
        last = tb[-1]
        text += f" (at {last.filename}:{last.lineno})"
    return text[:4000]
