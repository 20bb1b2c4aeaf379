"""`fleet-worker`: imports the app's job modules, then claims and runs until stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence

from fleet import logs, telemetry
from fleet.apps import import_apps
from fleet.command_jobs import load_command_jobs
from fleet.db import resolve_url
from fleet.errors import ConfigError
from fleet.jobs import registered
from fleet.settings import worker_settings
from fleet.signals import on_stop_signal
from fleet.worker.loop import EXIT_ABANDONED, Worker


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
    logs.configure(settings.log_format, process="worker")
    telemetry.configure("fleet-worker", settings.worker_id, os.environ)
    stop = threading.Event()
    worker = Worker(settings, handlers, stop)

    def on_signal(sig: signal.Signals) -> None:
        try:
            if not stop.is_set():
                logs.event("stop_requested", worker_id=settings.worker_id, signal=sig.name)
        finally:  # stop even if the line cannot be written
            stop.set()
            worker.wake.set()

    on_stop_signal(on_signal)
    code = worker.run()
    if code == EXIT_ABANDONED:
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
