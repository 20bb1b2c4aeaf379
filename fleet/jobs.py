"""Job registration and the context a handler receives.

A worker runs only jobs its own code registered (or command jobs declared on its side): a row in
the database names a job, it can never make a worker run anything else.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet.declare import Schedule
from fleet.errors import Cancelled
from fleet.timing.window import NO_WINDOW, Window

Handler = Callable[["JobContext"], Any]

_REGISTRY: dict[str, Handler] = {}


def job(name: str, *, schedule: Schedule | Sequence[Schedule] = ()) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of job `name`.

    `schedule` (a `fleet.Cron`, `fleet.Every` or `fleet.Schedule`, or several) declares when the
    job runs; such a schedule is named after the job unless it has a name of its own. Workers
    ignore it: `fleetctl apply --app MODULE` writes it to the database.
    """
    schedules = [schedule] if isinstance(schedule, Schedule) else list(schedule)
    for s in schedules:
        if not isinstance(s, Schedule):
            raise TypeError(
                f"@fleet.job({name!r}): schedule must be a fleet.Cron, fleet.Every or fleet.Schedule "
                f"(or a list of them), not {type(s).__name__}"
            )
        s.for_job(name)

    def register(fn: Handler) -> Handler:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"job {name!r} is registered twice")
        _REGISTRY[name] = fn
        return fn

    return register


def register(name: str, fn: Handler) -> None:
    """Register `fn` as the handler of job `name` (what @job does)."""
    job(name)(fn)


def registered() -> dict[str, Handler]:
    """The registered jobs by name."""
    return dict(_REGISTRY)


def is_async(fn: Handler) -> bool:
    """Whether `fn` is an `async def` handler, run on the worker's event loop rather than on a thread:
    what `inspect.iscoroutinefunction` says of it (a partial of one counts), or an object whose
    `__call__` is one. A sync function returning a coroutine (a decorator's plain `def` wrapper) is
    sync: it may block, or run the coroutine itself."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's method, not a callable check
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(call)


def idempotency_key(schedule: str, slot: datetime) -> str:
    """`schedule:slot` with the slot in ISO-8601 UTC: the same for every attempt of a slot."""
    return f"{schedule}:{slot_iso(slot)}"


def slot_iso(slot: datetime) -> str:

    return slot.astimezone(UTC).isoformat().replace("+00:00", "Z")


_SIGNALS_LOCK = threading.Lock()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class CancelSignal:
    """A one-way cancellation flag that can be waited on.

    Like `threading.Event`, but the event (a lock and a condition) is only made when someone waits
    or asks to be called: most attempts end without anyone waiting on, or setting, their signal.
    Setting and first waiting, both rare, share one lock for all signals.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with _SIGNALS_LOCK:
            self._set = True
            if self._event is not None:
                self._event.set()

    def wait(self, timeout: float) -> bool:
        """Block until set or `timeout` seconds pass; True when set."""
        if self._set:
            return True
        with _SIGNALS_LOCK:
            if self._event is None:
                self._event = threading.Event()
                if self._set:
                    self._event.set()
        return self._event.wait(max(0.0, timeout))

    def on_set(self, callback: Callable[[], object]) -> None:
        """Call `callback` once when the signal is set (at once if it is already), on the thread that
        sets it: it must be quick and must not set a signal itself."""
        with _SIGNALS_LOCK:
            if not self._set:
                self._event = _Calling(callback, self._event)
                return
        callback()


class _Calling(threading.Event):
    """The event of a signal somebody asked to be called by: setting it calls them (and sets the
    event that was there before, which threads may be waiting on)."""

    def __init__(self, callback: Callable[[], object], before: threading.Event | None) -> None:
        super().__init__()
        self.callback = callback
        self.before = before

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        if self.before is not None:
            self.before.set()
        self.callback()


@dataclass
class JobContext:
    """What a handler knows about its attempt. Long handlers should watch `cancelled` (or, in a sync
    handler, sleep with `wait`; in an `async def` one, with `await sleep`). `window` is what the run
    covers (`fleet.Window`); what the handler returns (JSON, at most 8 KiB) is stored with the run
    and handed to the next run of the schedule as `window.previous_result`."""

    schedule: str
    slot: datetime
    attempt: int
    args: dict[str, Any]
    worker_id: str
    job: str = ""
    cancel_event: CancelSignal = field(default_factory=CancelSignal)
    # Monotonic instant until which the worker trusts its lease (moved on by each heartbeat). Past
    # it the attempt counts as cancelled at once, before any database round trip tells so: a worker
    # paused past its lease must not go on to side effects when it wakes.
    lease_deadline: Callable[[], float] = field(default=lambda: math.inf)
    # What this run covers: the previous successful slot and its result, the slots folded into it.
    window: Window = NO_WINDOW

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.schedule, self.slot)

    @property
    def cancelled(self) -> bool:
        """True once the attempt must stop: lease lost, timed out, or the worker is shutting down."""
        if self.cancel_event.is_set():
            return True
        if time.monotonic() > self.lease_deadline():
            self.cancel_event.set()
            return True
        return False

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, returning True early if the attempt is cancelled. In a sync handler;
        on an event loop (an `async def` handler) it raises RuntimeError: use `await ctx.sleep`."""
        if _on_event_loop():
            raise RuntimeError("ctx.wait would block the event loop: use `await ctx.sleep(seconds)`")
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if self.cancelled:
                return True
            if now >= end:
                return False
            # Wake at the lease deadline too: a heartbeat may have moved it on, or it has run out.
            if self.cancel_event.wait(min(end, self.lease_deadline()) - now + 0.001):
                return True

    async def sleep(self, seconds: float) -> bool:
        """In an `async def` handler: sleep up to `seconds`, returning True early if the attempt is
        cancelled. Cancellation reaches a handler awaiting this as `asyncio.CancelledError`, like any
        other await; True means it was seen before the sleep began or at a lease deadline."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if self.cancelled:
                return True
            if now >= end:
                return False
            # Wake at the lease deadline too: a heartbeat may have moved it on, or it has run out.
            await asyncio.sleep(min(end, self.lease_deadline()) - now + 0.001)

    def check(self) -> None:
        """Raise `Cancelled` if the attempt was cancelled."""
        if self.cancelled:
            raise Cancelled("the attempt was cancelled")
