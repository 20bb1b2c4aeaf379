"""The embedded PostgreSQL (pgserver) of a directory, and how other commands find the `fleetctl up`
that runs it.

Only `fleetctl up` and the test suite start the server (in `.fleet/pgdata`). While `up` runs it
holds an exclusive lock on `.fleet/up.lock` and keeps `.fleet/up.json` (its pid and, when it runs
the embedded server, that server's URL): any other fleet process started in the directory uses
that server while the lock is held, and no other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from fleet.errors import DatabaseUnavailable

FLEET_DIR = Path(".fleet")
EMBEDDED_DIR = FLEET_DIR / "pgdata"
UP_LOCK = FLEET_DIR / "up.lock"
UP_STATE = FLEET_DIR / "up.json"


def embedded_url(base_dir: Path | None = None) -> str:
    """Start (or join) the embedded server in `<base_dir>/.fleet/pgdata` and return its libpq URI.

    For `fleetctl up` and the test suite only: the server outlives this process, until
    `stop_embedded` (called by `up` on exit, by `fleetctl down`, and by the tests) stops it.
    """
    url = start_embedded(base_dir, None)
    assert url is not None  # nothing can stop it
    return url


def start_embedded(base_dir: Path | None, stop: threading.Event | None) -> str | None:
    """`embedded_url`, given up when `stop` is set before the server is ready: then None, and nothing
    this start began is left running."""
    base = (base_dir or Path.cwd()).resolve()
    pgdata = base / EMBEDDED_DIR
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    was_running = embedded_pid(base) is not None
    log = pgdata.parent / "pgserver.log"
    # Started in a session of its own, so that a Ctrl-C in this terminal reaches only this process,
    # which decides: initdb, interrupted by the terminal's signal, printed its output and a traceback.
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleet.store.embedded", str(pgdata)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
    try:
        while True:
            try:
                out, _ = proc.communicate(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if stop is not None and stop.is_set():
                    raise _GivenUp from None
    except BaseException as e:  # given up, or interrupted (KeyboardInterrupt): nothing is left running
        _abandon_start(proc)
        if not was_running and embedded_pid(base) is not None:
            stop_embedded(base)
        if isinstance(e, _GivenUp):
            return None
        raise
    url = out.decode().strip()
    if proc.returncode != 0 or not url:
        raise DatabaseUnavailable(f"the embedded PostgreSQL did not start; see {log} and {pgdata / 'log'}")
    return url


class _GivenUp(Exception):
    """A start of the embedded server given up (its `stop` was set)."""


def _abandon_start(proc: subprocess.Popen[bytes]) -> None:
    """End the process group of a start of the embedded server (initdb, on SIGTERM, removes what it
    wrote; a server already started has a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    end = time.monotonic() + 10
    while time.monotonic() < end:  # its children (initdb) outlive it for a moment
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _serve(pgdata: Path) -> str:
    """Start (or join) the server of `pgdata` with pgserver; its URI. Runs in the process that
    `embedded_url` starts."""
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(pgdata, cleanup_mode=None)  # type: ignore[attr-defined]
    return str(server.get_uri())


def embedded_pid(base_dir: Path | None = None) -> int | None:
    """The pid of the embedded server of `base_dir` when it runs, else None."""
    pid = read_pid((base_dir or Path.cwd()) / EMBEDDED_DIR / "postmaster.pid")
    return pid if pid is not None and pid_alive(pid) else None


def stop_embedded(base_dir: Path | None = None) -> bool:
    """Stop the embedded server of `base_dir` if it runs; True when one was stopped."""
    pgdata = ((base_dir or Path.cwd()) / EMBEDDED_DIR).resolve()
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    bindir = Path(pgserver.__file__).parent / "pginstall" / "bin"
    cmd = as_user(pgdata.owner(), [str(bindir / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode == 0


def as_user(user: str, cmd: list[str]) -> list[str]:
    """`cmd` run as `user` (through `su`) unless that is who runs this process: PostgreSQL's tools
    run as the owner of their data directory, never as root."""
    import pwd
    import shlex

    if user == pwd.getpwuid(os.geteuid()).pw_name:
        return cmd
    return ["su", user, "-s", "/bin/sh", "-c", " ".join(shlex.quote(c) for c in cmd)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pid(path: Path) -> int | None:
    """The number on the first line of a pid file, None when there is none."""
    try:
        first = path.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


# -- the `fleetctl up` of a directory ----------------------------------------------------------------


@dataclass(frozen=True)
class UpState:
    """What a running `fleetctl up` says about itself in `.fleet/up.json`."""

    pid: int
    url: str | None  # the embedded server's URL; None while starting, or when given a URL of its own
    started_db: bool  # it started the embedded server (and stops it on exit)


def up_running(base_dir: Path | None = None) -> bool:
    """Whether a `fleetctl up` holds this directory's lock. The kernel drops the lock when that
    process dies, however it dies: a pid file alone could name a dead or reused pid."""
    path = (base_dir or Path.cwd()) / UP_LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        # A shared lock is refused while `up` holds its exclusive one; taken, it is let go at once
        # (an `up` starting meanwhile tries again for a moment before it gives up).
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def read_up_state(base_dir: Path | None = None) -> UpState | None:
    """The state file a `fleetctl up` left in `base_dir` (running or not), None when there is none."""
    try:
        raw = json.loads(((base_dir or Path.cwd()) / UP_STATE).read_text())
        return UpState(int(raw["pid"]), raw.get("url") or None, bool(raw.get("started_db")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_up_state(base_dir: Path, state: UpState) -> None:
    """Record `state` for the other commands started in `base_dir` (readable by its owner only)."""
    path = base_dir / UP_STATE
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps({"pid": state.pid, "url": state.url, "started_db": state.started_db}) + "\n")
    os.replace(tmp, path)


def remove_up_state(base_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (base_dir / UP_STATE).unlink()


def running_up(base_dir: Path | None = None) -> UpState | None:
    """The state of the `fleetctl up` running in `base_dir`, None when none runs there."""
    if not up_running(base_dir):
        return None
    return read_up_state(base_dir) or UpState(read_pid((base_dir or Path.cwd()) / UP_LOCK) or 0, None, False)


if __name__ == "__main__":
    print(_serve(Path(sys.argv[1])), flush=True)
