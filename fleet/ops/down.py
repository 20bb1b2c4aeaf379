"""`fleetctl down`: stop what `fleetctl up` runs, or left running after a crash, in this directory.

In order: a running `up` is asked to stop as Ctrl-C would (its workers finish or hand back their
runs); then a supervisord an earlier `up` left behind is shut down the same way, and the ticker and
workers of a supervisord that was killed are stopped; last the embedded PostgreSQL of `.fleet/pgdata`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
import xmlrpc.client
from collections.abc import Callable
from pathlib import Path

from fleet.ops.control import Supervisor, SupervisorUnavailable, serverurl_from_config
from fleet.store.embedded import (
    EMBEDDED_DIR,
    FLEET_DIR,
    embedded_pid,
    pid_alive,
    read_pid,
    remove_up_state,
    running_up,
    stop_embedded,
    up_running,
)

# How long `up` may take to stop: its workers' grace, supervisord's margin, the ticker; a little more.
UP_STOP_TIMEOUT_S = 300.0
SUPERVISORD_STOP_TIMEOUT_S = 120.0


def runs_with(pid: int, text: str) -> bool:
    """Whether process `pid`'s command line contains `text` (a pid file may name a reused pid)."""
    try:
        return text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no /proc here: trust the pid file
    except OSError:
        return False


def running(pid: int) -> bool:
    """Whether process `pid` runs: alive, and not a zombie waiting for its parent to reap it."""
    if not pid_alive(pid):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: alive is the best answer
    return state not in ("Z", "X")


def left_supervisord(fleet_dir: Path) -> int | None:
    """The pid of a supervisord still running the configuration `up` wrote in `fleet_dir`."""
    pid = read_pid(fleet_dir / "supervisord.pid")
    conf = fleet_dir / "supervisord.conf"
    return pid if pid and running(pid) and runs_with(pid, str(conf)) else None


def stop_left_supervisord(fleet_dir: Path, pid: int, stop: threading.Event | None = None) -> bool:
    """Shut supervisord `pid` of `fleet_dir` down in order (its workers finish or hand back their
    runs) and wait for it; True once it is gone. `stop` set: give up waiting."""
    try:
        Supervisor(serverurl_from_config(fleet_dir / "supervisord.conf")).shutdown()
    except (SupervisorUnavailable, xmlrpc.client.Fault):  # Fault: it is shutting down already
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    return _wait(lambda: not running(pid), SUPERVISORD_STOP_TIMEOUT_S, stop)


def left_processes(fleet_dir: Path) -> list[int]:
    """Processes the supervisord of `fleet_dir` started that outlived it (it was killed itself): the
    environment supervisord gives its children names its control socket, which is this directory's."""
    try:
        marker = f"SUPERVISOR_SERVER_URL={serverurl_from_config(fleet_dir / 'supervisord.conf')}".encode()
    except SupervisorUnavailable:
        return []
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return sorted(pid for pid in found if pid != os.getpid() and running(pid))


def stop_processes(pids: list[int]) -> bool:
    """SIGTERM (workers finish or hand back their runs), then SIGKILL what is left after the wait."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    if _wait(lambda: not any(running(pid) for pid in pids), SUPERVISORD_STOP_TIMEOUT_S):
        return True
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return _wait(lambda: not any(running(pid) for pid in pids), 10)


def _wait(done: Callable[[], bool], timeout_s: float, stop: threading.Event | None = None) -> bool:
    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end or (stop is not None and stop.is_set()):
            return False
        time.sleep(0.1)
    return True


def cmd_down(args: argparse.Namespace) -> int:
    base = Path.cwd()
    fleet_dir = base / FLEET_DIR
    stopped: list[str] = []
    failed: list[str] = []

    def say(text: str) -> None:
        print(f"fleetctl down: {text}", flush=True)

    up = running_up(base)
    if up is not None and up.pid:
        say(f"stopping fleetctl up (pid {up.pid}): workers finish or hand back their runs")
        with contextlib.suppress(ProcessLookupError):
            os.kill(up.pid, signal.SIGTERM)
        if _wait(lambda: not up_running(base), UP_STOP_TIMEOUT_S):
            stopped.append(f"fleetctl up (pid {up.pid})")
        else:
            failed.append(f"fleetctl up (pid {up.pid}) did not stop within {UP_STOP_TIMEOUT_S:.0f}s")
    sv = left_supervisord(fleet_dir)
    if sv is not None:
        say(f"stopping the supervisord (pid {sv}) a fleetctl up left running")
        if stop_left_supervisord(fleet_dir, sv):
            stopped.append(f"supervisord (pid {sv}) with its ticker and workers")
        else:
            failed.append(f"supervisord (pid {sv}) did not stop")
    orphans = left_processes(fleet_dir) if not up_running(base) else []
    if orphans:
        listed = ", ".join(map(str, orphans))
        say(f"stopping the fleet processes (pids {listed}) a killed supervisord left running")
        if stop_processes(orphans):
            stopped.append(f"the fleet processes a killed supervisord left (pids {listed})")
        else:
            failed.append(f"the fleet processes (pids {listed}) did not stop")
    pg = embedded_pid(base)
    if pg is not None:
        if stop_embedded(base):
            stopped.append(f"the embedded PostgreSQL (pid {pg}) in {EMBEDDED_DIR}")
        else:
            failed.append(f"the embedded PostgreSQL (pid {pg}) in {EMBEDDED_DIR} did not stop")
    if not up_running(base):
        remove_up_state(base)
    for what in stopped:
        say(f"stopped {what}")
    for what in failed:
        print(f"fleetctl down: {what}", file=sys.stderr)
    if not stopped and not failed:
        say("nothing runs in this directory")
    return 1 if failed else 0
