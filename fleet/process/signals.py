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

Each executable starts through `interruptible`, which installs Ctrl-C's handling itself before its
modules load: Python only installs its own when SIGINT is not ignored at start, and a shell's `cmd &`
or some CI runners start a process with it ignored.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

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


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Within the block, a Ctrl-C is noted, then raised as KeyboardInterrupt when the block ends.
    For loading modules: raised inside an import, KeyboardInterrupt can be swallowed (by a callback of
    the import machinery, printed as "Exception ignored") or, inside an extension module's
    initialisation (orjson's), crash the process. Outside the main thread, or where Ctrl-C is not
    Python's default KeyboardInterrupt, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    if old is not signal.default_int_handler:
        signal.signal(signal.SIGINT, old)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if noted:
        raise KeyboardInterrupt


def interruptible(prog: str, module: str) -> int:
    """Run `module`'s `main()` as the executable `prog`, with Ctrl-C raising KeyboardInterrupt
    whether SIGINT was inherited handled or ignored. A Ctrl-C while the modules load, or one the
    command does not handle itself, is one line on stderr and exit code 130."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupts_deferred():
            main: Callable[[], int] = importlib.import_module(module).main
        return main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the process is ending: one line, whatever comes
        with contextlib.suppress(OSError):
            print(f"{prog}: interrupted", file=sys.stderr)
        return 130
