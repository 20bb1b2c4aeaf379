"""A run's previous success, looked up when its handler first reads `ctx.window`.

The claim does not look it up: most handlers never read their window, and the lookup (a probe of
the schedule's successful runs) cost more than everything else the claim does for a run. The first
read asks the database once, keeps what it found with the run (so every later attempt of the slot
sees the same window) and with the attempt (so later reads ask nothing).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from fleet.store.db import connect
from fleet.store.queries import q
from fleet.worker.attempt import Attempt


def look_up(conn: psycopg.Connection[Any], a: Attempt, worker_id: str) -> dict[str, Any]:
    """The window of attempt `a` with its previous success, as kept with the run: the one stored
    already when it names one, else what the lookup found (kept when `a` still holds the run)."""
    row = conn.execute(
        q("run_window_look"), {"name": a.schedule, "slot": a.slot, "attempt": a.attempt, "worker": worker_id}
    ).fetchone()
    assert row is not None  # one row whatever was found
    if row["kept"] is not None:
        return dict(row["kept"])
    stored = row["stored"] or {}
    if "previous_slot" in stored:
        return dict(stored)
    return {**stored, **row["found"]}  # no longer this attempt's to keep: what it would have been


class PreviousLookup:
    """Looks windows up for a worker's handlers on one connection of its own, opened at the first
    lookup (a worker whose handlers never read a window opens none) and again after an error.
    Handlers reading at once take turns: each lookup is one short statement."""

    def __init__(self, worker_id: str, open_conn: Callable[[], psycopg.Connection[Any]]) -> None:
        self.worker_id = worker_id
        self._open = open_conn
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    @classmethod
    def for_url(cls, worker_id: str, url: str) -> PreviousLookup:
        return cls(worker_id, lambda: connect(url, f"fleet-worker {worker_id} window"))

    def __call__(self, a: Attempt) -> dict[str, Any]:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._open()
                return look_up(self._conn, a, self.worker_id)
            except psycopg.Error:
                self._close()
                raise

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
