"""Stop signals (SIGTERM, SIGINT, and any the caller names), acted on outside the signal handler.

A Python signal handler runs in the main thread between two of its bytecodes, wherever that thread
is: inside a lock it holds (writing a log line, clearing or waiting on an event) or inside the
handler itself, when a second signal comes while the first is handled. A handler that takes a lock
(setting a `threading.Event` does) can then wait for itself forever: a worker sent SIGTERM twice in
quick succession hung in the log's lock and had to be killed. The handler here only writes the
signal's number to a pipe; a thread of its own reads it and calls back, taking locks like any other
thread.

A stop signal that comes while the process exits is ignored: Python puts the default action back
late in its exit, and a second SIGTERM then (supervisord's, after systemd's) would end a process that
had already stopped cleanly by the signal instead of with its exit code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Sequence

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signal(
    callback: Callable[[signal.Signals], None], signals: Sequence[signal.Signals] = STOP_SIGNALS
) -> Callable[[], None]:
    """Call `callback` (on a thread of its own, once per signal received) for each of `signals`.
    Call from the main thread. Returns a function that puts the previous handlers back; until it is
    called, the signals are ignored once the process begins to exit."""
    r, w = os.pipe()
    os.set_blocking(w, False)

    def handler(signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):  # full: signals enough to stop wait to be read
            os.write(w, bytes((signum,)))

    def relay() -> None:
        with open(r, "rb", buffering=0) as pipe:  # closes the read end when the write end is closed
            while data := pipe.read(64):
                for signum in data:
                    callback(signal.Signals(signum))

    def ignore() -> None:  # at exit: nothing is left to stop
        for s in signals:
            signal.signal(s, signal.SIG_IGN)

    threading.Thread(target=relay, name="fleet-signals", daemon=True).start()
    old = {s: signal.signal(s, handler) for s in signals}
    atexit.register(ignore)

    def restore() -> None:
        atexit.unregister(ignore)
        for s, h in old.items():
            signal.signal(s, h)
        os.close(w)

    return restore
