"""Job registration and the context a handler receives.

A worker runs only jobs its own code registered (or command jobs declared on its side): a row in
the database names a job, it can never make a worker run anything else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet.errors import Cancelled

Handler = Callable[["JobContext"], Any]

_REGISTRY: dict[str, Handler] = {}


def job(name: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of job `name`."""

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


@dataclass
class JobContext:
    """What a handler knows about its attempt. Long handlers should watch `cancelled`."""

    schedule: str
    slot: datetime
    attempt: int
    args: dict[str, Any]
    worker_id: str
    job: str = ""
    cancel_event: threading.Event = field(default_factory=threading.Event)

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.schedule, self.slot)

    @property
    def cancelled(self) -> bool:
        """True once the attempt must stop: lease lost, timed out, or the worker is shutting down."""
        return self.cancel_event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, returning True early if the attempt is cancelled."""
        return self.cancel_event.wait(seconds)

    def check(self) -> None:
        """Raise `Cancelled` if the attempt was cancelled."""
        if self.cancel_event.is_set():
            raise Cancelled("the attempt was cancelled")
