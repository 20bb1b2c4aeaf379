"""Wake-ups: a dedicated connection LISTENs for new runs and sets the worker's wake event."""

from __future__ import annotations

import threading

from fleet import logs
from fleet.db import connect, describe


class Listener(threading.Thread):
    """Sets `wake` on every NOTIFY fleet_runs; reconnects by itself. Polling remains the fallback."""

    def __init__(self, url: str, app: str, wake: threading.Event) -> None:
        super().__init__(name="fleet-listen", daemon=True)
        self.url = url
        self.app = app
        self.wake = wake
        self.halt = threading.Event()

    def run(self) -> None:
        errors = logs.Throttle()  # a line when listening fails, then every 30 s while it keeps failing
        while not self.halt.is_set():
            try:
                with connect(self.url, self.app, listen=True) as conn:
                    conn.execute("LISTEN fleet_runs")
                    errors.reset()
                    while not self.halt.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.wake.set()
            except Exception as e:  # noqa: BLE001 - a lost listener only delays wake-ups to the poll
                if not self.halt.is_set():
                    if errors.due():
                        logs.event("listen_error", error=describe(e))
                    self.halt.wait(1.0)
