"""`fleet-worker`: imports the app's job modules, then claims and runs until stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence

from fleet.errors import ConfigError
from fleet.jobs import registered
from fleet.observe import logs, telemetry
from fleet.process import command_jobs
from fleet.process.apps import import_apps
from fleet.process.command_jobs import load_command_jobs
from fleet.process.settings import worker_settings
from fleet.process.signals import on_stop_signal
from fleet.store.db import resolve_url
from fleet.worker.loop import EXIT_ABANDONED, EXIT_FORCED, Worker

# What the first stop signal says; a second Ctrl-C (SIGINT) forces the stop. A second SIGTERM does
# not: a process manager may send two (systemd's, then supervisord's) and means a graceful stop.
STOP_MESSAGE = "stopping, press Ctrl-C again to force"
# A forced stop ends the process within this long, whatever it is waiting for.
FORCE_EXIT_S = 3.0


def _end_after(seconds: float) -> None:
    """End the process `seconds` from now if it has not ended: command jobs' process trees are killed
    first. Nothing is written (a line could wait on a lock the stuck thread holds)."""
    time.sleep(seconds)
    with contextlib.suppress(Exception):
        command_jobs.kill_running()
    os._exit(EXIT_FORCED)


def main(argv: Sequence[str] | None = None) -> int:
    debug = False
    try:
        settings = worker_settings(argv, os.environ)
        debug = settings.debug
        settings = dataclasses.replace(settings, database_url=resolve_url(settings.database_url))
        sys.path.insert(0, os.getcwd())
        import_apps(settings.app)
        if settings.jobs_file:
            for j in load_command_jobs(settings.jobs_file):
                # A terminated command's thread returns after kill_after at most: before it is abandoned.
                if j.kill_after_s >= settings.abandon_after_s:
                    raise ConfigError(
                        f"--jobs: job {j.name!r}: kill_after: must be shorter than --abandon-after "
                        f"({j.kill_after_s:g} s >= {settings.abandon_after_s:g} s)"
                    )
        handlers = registered()
        if not handlers:
            raise ConfigError('--app: the modules registered no job (use @fleet.job("name"))')
    except ConfigError as e:
        if debug and e.__cause__ is not None:
            traceback.print_exception(e.__cause__)
        print(f"fleet-worker: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    worker = Worker(settings, handlers, stop)
    requested = threading.Event()  # a stop signal came (the worker may also stop by itself)

    def on_output_gone() -> None:
        # Its log's reader gone (`fleet-worker | head -1`): stop as on SIGTERM, saying nothing.
        requested.set()
        stop.set()
        worker.wake.set()

    logs.configure(settings.log_format, on_output_gone=on_output_gone, process="worker")
    telemetry.configure("fleet-worker", settings.worker_id, os.environ)

    def on_signal(sig: signal.Signals) -> None:
        # Signals come here one at a time, on the relay thread.
        force = sig == signal.SIGINT and requested.is_set() and not worker.forced
        try:
            if not requested.is_set():
                logs.event(
                    "stop_requested", worker_id=settings.worker_id, signal=sig.name, message=STOP_MESSAGE
                )
            elif force:
                logs.event(
                    "stop_forced",
                    worker_id=settings.worker_id,
                    signal=sig.name,
                    running=len(worker.inflight),
                    message=f"forced: unfinished runs are handed back now and the process ends within "
                    f"{FORCE_EXIT_S:g} s; a run not handed back is retaken when its lease runs out",
                )
        finally:  # stop even if the line cannot be written
            requested.set()
            stop.set()
            worker.wake.set()
            if force:
                worker.force()
                # Whatever the worker waits for (a database out of reach, a handler that ignores its
                # cancellation), the process ends in time: its runs' leases run out as after a crash.
                threading.Thread(
                    target=_end_after, args=(FORCE_EXIT_S,), name="fleet-forced", daemon=True
                ).start()

    on_stop_signal(on_signal)
    code = logs.exit_code(worker.run())
    if code in (EXIT_ABANDONED, EXIT_FORCED):
        # The abandoned handler's thread runs on, and what earlier handlers started may too: Python's
        # own exit would wait for ever for a non-daemon thread or a multiprocessing child. The worker
        # has stopped (its runs recorded or handed back): the process ends here, its output flushed.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
