"""Stop signals (SIGTERM, SIGINT), acted on outside the signal handler.

A Python signal handler runs in the main thread between two of its bytecodes, wherever that thread
is: inside a lock it holds (writing a log line, clearing an event) or inside the handler itself,
when a second signal comes while the first is handled. A handler that takes a lock can then wait
for itself forever: a worker sent SIGTERM twice in quick succession hung in the log's lock and had
to be killed. The handler here only writes the signal's number to a pipe; a thread of its own reads
it and calls back, taking locks like any other thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signal(callback: Callable[[signal.Signals], None]) -> None:
    """Call `callback` (on a thread of its own, once per signal received) for SIGTERM and SIGINT.
    Call from the main thread, once per process."""
    r, w = os.pipe()
    os.set_blocking(w, False)

    def handler(signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):  # full: signals enough to stop wait to be read
            os.write(w, bytes((signum,)))

    def relay() -> None:
        while data := os.read(r, 64):
            for signum in data:
                callback(signal.Signals(signum))

    threading.Thread(target=relay, name="fleet-signals", daemon=True).start()
    for s in STOP_SIGNALS:
        signal.signal(s, handler)
