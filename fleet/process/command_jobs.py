"""Command jobs declared on the worker's side in a TOML file: argv, environment, permanent exit codes.

```toml
[[job]]
name = "backup.db"
argv = ["/usr/local/bin/backup", "--full"]
env = { BACKUP_TARGET = "s3://bucket" }
permanent_exit_codes = [2]
cwd = "/srv/backup"          # optional
kill_after = "10s"           # optional: SIGTERM, then SIGKILL after this long (default 10 s)
```

The command runs under a keeper (fleet.process.process_tree), a child subreaper below which every process it
starts stays, daemonising double forks included. On cancellation (timeout, lease lost, worker
stopping) the keeper ends that whole tree: SIGTERM, then SIGKILL after kill_after. A worker that
dies ends it too (the keeper's parent-death signal).

The process gets FLEET_SCHEDULE, FLEET_SLOT, FLEET_ATTEMPT, FLEET_IDEMPOTENCY_KEY, FLEET_ARGS (JSON),
FLEET_WORKER_ID, its run's window (FLEET_PREVIOUS_SLOT, and all of it as JSON in FLEET_WINDOW) and,
when tracing, TRACEPARENT.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from fleet.errors import Cancelled, ConfigError, Permanent
from fleet.jobs import JobContext, register, slot_iso
from fleet.process.process_tree import END, END_NOW, ProcessTree, keeper_argv
from fleet.timing.schedfile import parse_toml
from fleet.timing.schedule import TimingError, parse_duration
from fleet.timing.window import window_text

_POLL_S = 0.05
# How long past its own deadline a keeper is waited for before the worker kills the tree itself (a
# keeper that was killed or stopped): after kill_after when ending a command, at once at exit.
_KEEPER_SLACK_S = 1.0


@dataclass(frozen=True)
class CommandJob:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    permanent_exit_codes: frozenset[int]
    cwd: str | None
    kill_after_s: float

    def __call__(self, ctx: JobContext) -> None:
        env = {**os.environ, **self.env}
        window = ctx.window
        env.update(
            FLEET_SCHEDULE=ctx.schedule,
            FLEET_SLOT=slot_iso(ctx.slot),
            FLEET_ATTEMPT=str(ctx.attempt),
            FLEET_IDEMPOTENCY_KEY=ctx.idempotency_key,
            FLEET_ARGS=orjson.dumps(ctx.args).decode(),
            FLEET_WORKER_ID=ctx.worker_id,
            FLEET_PREVIOUS_SLOT=slot_iso(window.previous_slot) if window.previous_slot else "",
            FLEET_WINDOW=window_text(window),
        )
        from fleet.observe import telemetry

        traceparent = telemetry.current_traceparent()
        if traceparent:
            env["TRACEPARENT"] = traceparent
        # The keeper runs in a session of its own (a terminal's or the worker's group signals do not
        # reach it); the tree is followed from here too, in case the keeper is killed.
        status_r, status_w = os.pipe()
        try:
            proc = subprocess.Popen(
                keeper_argv(status_w, self.kill_after_s, self.argv),
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                pass_fds=(status_w,),
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        tree = ProcessTree(proc.pid)
        with _LIVE_LOCK:
            _LIVE[tree] = proc
        try:
            with open(status_r, "rb", buffering=0) as pipe:
                status = self._wait(ctx, proc, tree, pipe)
        finally:
            if proc.poll() is None:
                _end(proc, tree, self.kill_after_s)
            with _LIVE_LOCK:
                _LIVE.pop(tree, None)
        word, _, value = status.decode().partition(" ")
        if word == "error":
            errno = int(value)
            raise OSError(errno, os.strerror(errno), self.argv[0])
        if word != "exit":
            # The keeper was killed: end what is known of the tree as the keeper would have.
            tree.terminate(self.kill_after_s, proc.poll)
            raise RuntimeError(f"the command's keeper process ended unexpectedly (code {proc.returncode})")
        code = int(value)
        if code == 0:
            return
        if code in self.permanent_exit_codes:
            raise Permanent(f"command exited with permanent code {code}")
        raise RuntimeError(f"command exited with code {code}")

    def _wait(
        self, ctx: JobContext, proc: subprocess.Popen[bytes], tree: ProcessTree, pipe: BinaryIO
    ) -> bytes:
        """The keeper's line about the command (empty if the keeper was killed), once it has exited;
        raises Cancelled once the attempt is cancelled and the tree ended."""
        status = b""
        while not status.endswith(b"\n"):
            if select.select([pipe], [], [], _POLL_S)[0]:
                chunk = pipe.read(64)
                if not chunk:
                    break  # the keeper ended without a word
                status += chunk
                continue
            tree.track()
            if ctx.cancelled:
                _end(proc, tree, self.kill_after_s)
                raise Cancelled("command terminated: the attempt was cancelled")
        try:
            proc.wait(_KEEPER_SLACK_S)  # it exits as soon as it has said how the command ended
        except subprocess.TimeoutExpired:
            tree.kill()
            proc.wait()
        return status


def _end(proc: subprocess.Popen[bytes], tree: ProcessTree, kill_after_s: float) -> None:
    """Have the keeper end the command's whole tree (SIGTERM, SIGKILL after `kill_after_s`); kill
    the tree from here if the keeper does not finish in time."""
    proc.send_signal(END)
    try:
        proc.wait(kill_after_s + _KEEPER_SLACK_S)
    except subprocess.TimeoutExpired:
        tree.kill()
        proc.wait()


# The commands running now, by tree: a worker exiting kills what its stopping did not.
_LIVE: dict[ProcessTree, subprocess.Popen[bytes]] = {}
_LIVE_LOCK = threading.Lock()


def kill_running() -> int:
    """SIGKILL every process of the command jobs still running (a worker exiting before their
    terminations finished); returns how many commands there were."""
    with _LIVE_LOCK:
        live = list(_LIVE.items())
    for _, proc in live:
        proc.send_signal(END_NOW)
    end = time.monotonic() + _KEEPER_SLACK_S
    for tree, _ in live:
        while tree.root_alive() and time.monotonic() < end:
            time.sleep(0.01)
        if tree.root_alive():
            tree.kill()
    return len(live)


def load_command_jobs(path: str) -> list[CommandJob]:
    """Parse and register the command jobs of a file; ConfigError names the job and field."""
    try:
        doc = parse_toml(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"--jobs: cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"--jobs: {path} is not UTF-8 text (at byte offset {e.start})") from None
    except ValueError as e:
        raise ConfigError(f"--jobs: {path} is not valid TOML: {e}") from None
    if unknown := sorted(set(doc) - {"job"}):
        raise ConfigError(
            f"--jobs: {path}: unknown top-level key(s) {', '.join(unknown)} (jobs are [[job]] tables)"
        )
    entries = doc.get("job", [])
    if not isinstance(entries, list):
        raise ConfigError(f"--jobs: {path}: job: must be an array of tables ([[job]])")
    jobs = [_one(entry, i) for i, entry in enumerate(entries, start=1)]
    for j in jobs:
        register(j.name, j)
    return jobs


def _one(entry: Any, i: int) -> CommandJob:
    if not isinstance(entry, dict):
        raise ConfigError(f"--jobs: job #{i}: must be a table")
    name = entry.get("name")
    where = f"--jobs: job {name!r}" if isinstance(name, str) else f"--jobs: job #{i}"
    unknown = set(entry) - {"name", "argv", "env", "permanent_exit_codes", "cwd", "kill_after"}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: name: required")
    argv = entry.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError(f"{where}: argv: must be a non-empty list of strings")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{where}: env: must be a table of strings")
    codes = entry.get("permanent_exit_codes", [])
    if not isinstance(codes, list) or not all(isinstance(c, int) and 0 < c < 256 for c in codes):
        raise ConfigError(f"{where}: permanent_exit_codes: must be a list of exit codes 1-255")
    try:
        kill_after = parse_duration(entry.get("kill_after", "10s"), "kill_after").total_seconds()
    except TimingError as e:
        raise ConfigError(f"{where}: {e}") from None
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigError(f"{where}: cwd: must be a string")
    return CommandJob(name, tuple(argv), dict(env), frozenset(codes), cwd, kill_after)
