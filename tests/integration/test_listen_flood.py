"""A flood of NOTIFY fleet_runs (any role that can connect may send them) wakes a worker at most
once per short interval, and a single notification after a quiet spell still wakes it at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from fleet.worker.listen import Listener
from tests.support import wait_for


class CountingEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0
        self.times: list[float] = []

    def set(self) -> None:
        self.sets += 1
        self.times.append(time.monotonic())
        super().set()


def listening(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'flood-test listen'"
        " AND query LIKE 'LISTEN %'"
    ).fetchone()
    return bool(row and row["n"])


def test_a_notify_flood_is_coalesced(db_url: str, conn: psycopg.Connection[Any]) -> None:
    wake = CountingEvent()
    listener = Listener(db_url, "flood-test listen", wake, coalesce_s=0.1)
    listener.start()
    try:
        wait_for(lambda: listening(conn), what="the listener to LISTEN")
        # A single notification after a quiet spell wakes at once.
        sent = time.monotonic()
        conn.execute("NOTIFY fleet_runs")
        wait_for(lambda: wake.sets >= 1, timeout=5, interval=0.005, what="a wake-up")
        assert wake.times[0] - sent < 0.5
        time.sleep(0.2)  # past the quiet interval
        before = wake.sets
        # A flood: 40 commits of 500 distinct notifications each (the same payload twice in one
        # transaction is folded by the server), spread over about a second.
        start = time.monotonic()
        for batch in range(40):
            with conn.transaction():
                for i in range(500):
                    conn.execute("SELECT pg_notify('fleet_runs', %s)", (f"{batch}:{i}",))
            time.sleep(0.02)
        flood_s = time.monotonic() - start
        time.sleep(0.3)  # the owed wake at the end of the last interval
        woken = wake.sets - before
        assert woken >= 2, woken  # the flood was noticed, and its tail too
        assert woken <= flood_s / 0.1 + 3, (woken, flood_s)  # not 20,000 wake-ups
    finally:
        listener.halt.set()
        listener.join(5)
