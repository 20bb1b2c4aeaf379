"""The registry of live processes (`fleet_processes`): each ticker and worker keeps its row fresh."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

import psycopg

from fleet.store.queries import q

# A process not seen for this long is considered gone (it refreshes its row every few seconds).
STALE_AFTER_S = 60
# A ticker that recorded a crash within this long is reported (TICKER-CRASHING).
CRASH_RECENT_S = 300


def process_register(conn: psycopg.Connection[Any], pid_id: str, kind: str, jobs: Sequence[str] = ()) -> None:
    conn.execute(
        q("process_register"),
        {"id": pid_id, "kind": kind, "host": socket.gethostname(), "pid": os.getpid(), "jobs": list(jobs)},
    )


def process_touch(conn: psycopg.Connection[Any], pid_id: str, running: int = 0) -> None:
    conn.execute(q("process_touch"), {"id": pid_id, "running": running})


def process_crash(conn: psycopg.Connection[Any], pid_id: str, kind: str, error: str) -> None:
    """Record an unexpected error of this process on its row (see `process_crash` in processes.sql)."""
    conn.execute(
        q("process_crash"),
        {"id": pid_id, "kind": kind, "host": socket.gethostname(), "pid": os.getpid(), "error": error},
    )


def process_remove(conn: psycopg.Connection[Any], pid_id: str) -> None:
    conn.execute(q("process_remove"), {"id": pid_id})


def process_live_jobs(conn: psycopg.Connection[Any], stale_s: float = STALE_AFTER_S) -> tuple[int, set[str]]:
    """How many workers are live, and the jobs registered on at least one of them."""
    row = conn.execute(q("process_live_jobs"), {"stale_s": stale_s}).fetchone()
    assert row is not None
    return int(row["workers"]), set(row["jobs"])
