"""Lease renewal off the handlers' threads; cancels attempts whose lease is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sized
from typing import Any, Protocol

import psycopg
from psycopg_pool import ConnectionPool

from fleet.observe import logs
from fleet.process.settings import WorkerSettings
from fleet.store.db import prepared_statements_broke
from fleet.store.pool import unavailable
from fleet.store.queries import q
from fleet.store.registry import process_touch
from fleet.worker.attempt import LEASE_RAN_OUT, Attempt, trusted_for


class Holder(Protocol):
    """What the heartbeat and the lease watch need of a worker: its settings, how many runs it holds,
    and the attempts running now."""

    settings: WorkerSettings

    @property
    def inflight(self) -> Sized: ...

    def running_attempts(self) -> list[Attempt]: ...


_TOUCH_EVERY_S = 5.0


def run_heartbeat(
    conn: psycopg.Connection[Any], attempts: list[Any], lease_s: float, worker_id: str
) -> set[tuple[str, Any, int]]:
    """Renew the leases `worker_id` holds for `attempts` (fenced on their attempt numbers); returns
    the idents (run and attempt number) of those renewed."""
    if not attempts:
        return set()
    rows = conn.execute(
        q("run_heartbeat"),
        {
            "now": None,
            "worker": worker_id,
            "lease_s": lease_s,
            "names": [a.schedule for a in attempts],
            "slots": [a.slot for a in attempts],
            "attempts": [a.attempt for a in attempts],
        },
    ).fetchall()
    return {(r["schedule_name"], r["scheduled_for"], r["attempts"]) for r in rows}


class Heartbeat(threading.Thread):
    """Renews every running attempt's lease each `period` seconds, in one statement.

    An attempt whose row no longer matches (another worker took the lease over) is fenced: its
    handler is cancelled and nothing about it is written any more. An attempt whose lease runs out
    locally first is fenced by LeaseWatch, or here if the heartbeat comes first (after a pause): a
    lease is renewed only while it is trusted, so whether a paused worker goes on with its runs does
    not depend on which of its threads wakes first.
    """

    def __init__(
        self, worker: Holder, pool: ConnectionPool[Any], on_fenced: Callable[[Any, str], None]
    ) -> None:
        super().__init__(name="fleet-heartbeat", daemon=True)
        self.worker = worker
        self.pool = pool
        self.on_fenced = on_fenced
        self.halt = threading.Event()
        self.last_touch = 0.0

    def run(self) -> None:
        # Leases are renewed every `heartbeat_s`; the registry row at least every _TOUCH_EVERY_S,
        # so a worker with a long lease never ages out of `fleetctl workers`.
        period = self.worker.settings.heartbeat_s
        step = min(period, _TOUCH_EVERY_S)
        next_beat = time.monotonic() + period
        while not self.halt.wait(step):
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + period
                self.beat()
            elif time.monotonic() - self.last_touch >= _TOUCH_EVERY_S:
                self.touch()

    def touch(self) -> None:
        w = self.worker
        try:
            with self.pool.connection(timeout=max(1.0, _TOUCH_EVERY_S)) as conn:
                process_touch(conn, w.settings.worker_id, len(w.inflight))
                self.last_touch = time.monotonic()
        except Exception as e:  # noqa: BLE001 - the next beat tries again
            logs.event("heartbeat_error", worker_id=w.settings.worker_id, error=unavailable(e, self.pool))

    def beat(self) -> None:
        w = self.worker
        try:
            with self.pool.connection(timeout=max(1.0, w.settings.heartbeat_s)) as conn:
                sent = time.monotonic()
                snapshot = []
                for a in w.running_attempts():
                    if sent < a.lease_deadline_mono:
                        snapshot.append(a)
                    else:  # no longer trusted (the worker was paused): given up, not renewed
                        self.on_fenced(a, LEASE_RAN_OUT)
                renewed = run_heartbeat(conn, snapshot, w.settings.lease_s, w.settings.worker_id)
                trusted_until = sent + trusted_for(w.settings.lease_s)
                for a in snapshot:
                    if a.ident in renewed:
                        a.lease_deadline_mono = trusted_until
                    else:
                        self.on_fenced(a, "lease taken over by another worker")
                if sent - self.last_touch >= _TOUCH_EVERY_S:
                    process_touch(conn, w.settings.worker_id, len(w.inflight))
                    self.last_touch = sent
        except (psycopg.Error, Exception) as e:  # noqa: BLE001 - keep beating whatever went wrong
            if not prepared_statements_broke(e, worker_id=w.settings.worker_id):  # else: beats on, unprepared
                logs.event("heartbeat_error", worker_id=w.settings.worker_id, error=unavailable(e, self.pool))


class LeaseWatch(threading.Thread):
    """Fences each attempt at its local lease deadline, whatever the heartbeat is waiting for.

    The heartbeat moves an attempt's deadline on when a renewal succeeds. When the database cannot
    be reached, the renewal may wait on the network (up to the connection's `tcp_user_timeout`, and
    a new connection up to `connect_timeout`); this thread does no I/O, so the attempt is still given
    up on time: before the database lease ends and another worker may take the run over.
    """

    def __init__(self, worker: Holder, on_fenced: Callable[[Any, str], None]) -> None:
        super().__init__(name="fleet-lease-watch", daemon=True)
        self.worker = worker
        self.on_fenced = on_fenced
        self.halt = threading.Event()

    def run(self) -> None:
        step = self.worker.settings.heartbeat_s  # a new attempt's deadline is a lease away
        while True:
            now = time.monotonic()
            earliest = now + step
            for a in self.worker.running_attempts():
                if now >= a.lease_deadline_mono:
                    self.on_fenced(a, LEASE_RAN_OUT)
                else:
                    earliest = min(earliest, a.lease_deadline_mono)
            if self.halt.wait(earliest - now):
                return
