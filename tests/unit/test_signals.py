"""Stop signals: one that comes while the process exits does not end it by the signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# A SIGTERM late in the exit, as supervisord sends one to a ticker that systemd's SIGTERM already
# stopped. The cycle is collected after Python has put back the default action of the signals it
# handled, so its __del__ signals the process at that point of the exit.
SCRIPT = textwrap.dedent(
    """
    import gc, os, signal, sys
    from fleet.process.signals import on_stop_signal

    restore = on_stop_signal(lambda sig: None)
    if sys.argv[1] == "restored":
        restore()

    class LateSignal:
        def __del__(self, kill=os.kill, pid=os.getpid(), sig=signal.SIGTERM):
            kill(pid, sig)

    gc.disable()
    late = LateSignal()
    late.cycle = late
    del late
    """
)


@pytest.mark.parametrize(("mode", "returncode"), [("handled", 0), ("restored", -signal.SIGTERM)])
def test_a_stop_signal_during_the_exit_is_ignored_until_the_handlers_are_restored(
    mode: str, returncode: int
) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], timeout=30, check=False)
    assert done.returncode == returncode
