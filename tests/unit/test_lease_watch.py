"""A lease is trusted locally for less than its length, and LeaseWatch gives an attempt up at that
local deadline by itself: no database round trip, so a heartbeat stuck on the network cannot delay
it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from fleet.worker.attempt import LEASE_RAN_OUT, trusted_for
from fleet.worker.heartbeat import LeaseWatch


@dataclass
class FakeAttempt:
    key: str
    lease_deadline_mono: float


@dataclass
class Holder:
    """The part of a worker LeaseWatch reads: its settings and its running attempts."""

    attempts: list[FakeAttempt]
    settings: Any = field(default_factory=lambda: SimpleNamespace(heartbeat_s=5.0))
    fenced: list[tuple[str, float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def running_attempts(self) -> list[FakeAttempt]:
        with self.lock:
            fenced = {k for k, _, _ in self.fenced}
            return [a for a in self.attempts if a.key not in fenced]

    def fence(self, a: FakeAttempt, reason: str) -> None:
        with self.lock:
            self.fenced.append((a.key, time.monotonic(), reason))


def test_each_attempt_is_given_up_at_its_deadline_and_a_renewed_one_is_not() -> None:
    now = time.monotonic()
    early, late = FakeAttempt("early", now + 0.2), FakeAttempt("late", now + 0.5)
    renewed = FakeAttempt("r", now + 0.3)
    holder = Holder([early, late, renewed])
    watch = LeaseWatch(holder, holder.fence)  # type: ignore[arg-type]
    watch.start()
    try:
        time.sleep(0.1)
        renewed.lease_deadline_mono = time.monotonic() + 10  # a heartbeat moved it on
        time.sleep(1.1)
    finally:
        watch.halt.set()
        watch.join(2)
    assert not watch.is_alive()
    got = {k: (at, reason) for k, at, reason in holder.fenced}
    assert set(got) == {"early", "late"}, holder.fenced
    for a in (early, late):
        at, reason = got[a.key]
        # On time although its step is 5 s: it sleeps until the earliest deadline (the bound is
        # loose for busy machines; waiting for the step would miss it by seconds).
        assert a.lease_deadline_mono <= at < a.lease_deadline_mono + 0.5, (a.key, at - a.lease_deadline_mono)
        assert reason == LEASE_RAN_OUT


def test_a_lease_is_trusted_for_less_than_its_length() -> None:
    assert trusted_for(3.0) == pytest.approx(2.7)
    assert trusted_for(60.0) == pytest.approx(58.0)
    assert 0 < trusted_for(0.2) < 0.2
