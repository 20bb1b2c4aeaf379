"""Jobs that leave something behind in the worker: a thread, a process, a forked copy of the worker.
Each records what it did in $FLEET_TEST_DIR/events.log (one line per event)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

from fleet_test_events import record

import fleet
from fleet import JobContext


def _linger(pid_file: str) -> None:
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(1000)


@fleet.job("leaves_thread")
def leaves_thread(ctx: JobContext) -> None:
    """Starts a non-daemon thread that never ends, then ignores its cancellation for args.seconds."""
    # A thread started by a handler thread (a daemon) is a daemon unless told otherwise.
    threading.Thread(target=threading.Event().wait, name="never-ends", daemon=False).start()
    record("start", ctx)
    time.sleep(float(ctx.args.get("seconds", 60)))


@fleet.job("leaves_process")
def leaves_process(ctx: JobContext) -> None:
    """Starts a non-daemon multiprocessing child that sleeps (its pid in args.pid_file), then
    ignores its cancellation for args.seconds."""
    multiprocessing.Process(target=_linger, args=(ctx.args["pid_file"],)).start()
    record("start", ctx)
    time.sleep(float(ctx.args.get("seconds", 60)))


@fleet.job("forks")
def forks(ctx: JobContext) -> None:
    """Forks; the child records `child` and returns from the handler. The parent waits up to
    args.wait seconds for the child to end and records `reaped` with its exit code, or `running`."""
    pid = os.fork()
    if pid == 0:
        record("child", ctx)
        return
    end = time.monotonic() + float(ctx.args.get("wait", 5))
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            record(f"reaped:{os.waitstatus_to_exitcode(status)}", ctx)
            return
        time.sleep(0.01)
    record("running", ctx)
