"""Job registration and the context a handler receives.

A worker runs only jobs its own code registered (or command jobs declared on its side): a row in
the database names a job, it can never make a worker run anything else.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet.declare import Schedule
from fleet.errors import Cancelled

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


def idempotency_key(schedule: str, slot: datetime) -> str:
    """`schedule:slot` with the slot in ISO-8601 UTC: the same for every attempt of a slot."""
    return f"{schedule}:{slot_iso(slot)}"


def slot_iso(slot: datetime) -> str:

    return slot.astimezone(UTC).isoformat().replace("+00:00", "Z")


_SIGNALS_LOCK = threading.Lock()


class CancelSignal:
    """A one-way cancellation flag that can be waited on.

    Like `threading.Event`, but the event (a lock and a condition) is only made when someone waits:
    most attempts end without anyone waiting on, or setting, their signal. Setting and first
    waiting, both rare, share one lock for all signals.
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


@dataclass
class JobContext:
    """What a handler knows about its attempt. Long handlers should watch `cancelled`."""

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
        """Sleep up to `seconds`, returning True early if the attempt is cancelled."""
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

    def check(self) -> None:
        """Raise `Cancelled` if the attempt was cancelled."""
        if self.cancelled:
            raise Cancelled("the attempt was cancelled")
