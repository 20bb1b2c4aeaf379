"""Wake-ups: a dedicated connection LISTENs for new runs and sets the worker's wake event."""

from __future__ import annotations

import threading
import time

from psycopg import sql

from fleet.observe import logs
from fleet.store.db import connect, describe
from fleet.store.keys import RUNS_CHANNEL

# Any role that can connect may NOTIFY fleet_runs. However many notifications arrive, `wake` is set
# at most once per this interval (the first at once, one more at the interval's end if any came in
# it): a flood costs a claim round per interval, not one per notification.
COALESCE_S = 0.1


class Listener(threading.Thread):
    """Sets `wake` on NOTIFY fleet_runs, at most once per COALESCE_S; reconnects by itself. Polling
    remains the fallback."""

    def __init__(self, url: str, app: str, wake: threading.Event, coalesce_s: float = COALESCE_S) -> None:
        super().__init__(name="fleet-listen", daemon=True)
        self.url = url
        self.app = app
        self.wake = wake
        self.coalesce_s = coalesce_s
        self.halt = threading.Event()
        self._next = 0.0  # monotonic: no wake before this
        self._owed = False  # a notification came in the quiet interval

    def _notified(self) -> bool:
        """Count one notification; True while in the quiet interval (a wake is owed)."""
        now = time.monotonic()
        if now >= self._next:
            self.wake.set()
            self._next = now + self.coalesce_s
            self._owed = False
            return False
        self._owed = True
        return True

    def _settle(self) -> None:
        if self._owed and time.monotonic() >= self._next:
            self._notified()

    def run(self) -> None:
        errors = logs.Throttle()  # a line when listening fails, then every 30 s while it keeps failing
        while not self.halt.is_set():
            try:
                with connect(self.url, self.app, listen=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(RUNS_CHANNEL)))
                    errors.reset()
                    while not self.halt.is_set():
                        wait = max(0.0, self._next - time.monotonic()) if self._owed else 0.5
                        for _ in conn.notifies(timeout=wait):
                            if self._notified():
                                break  # wait out the quiet interval, reading what comes
                        self._settle()
            except Exception as e:  # noqa: BLE001 - a lost listener only delays wake-ups to the poll
                if not self.halt.is_set():
                    if errors.due():
                        logs.event("listen_error", error=describe(e))
                    self.halt.wait(1.0)
