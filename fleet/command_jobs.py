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

On cancellation (timeout, lease lost, worker stopping) the whole process tree is signalled: the
command's process group and every descendant seen while it ran, including those that left the
group with setsid.

The process gets FLEET_SCHEDULE, FLEET_SLOT, FLEET_ATTEMPT, FLEET_IDEMPOTENCY_KEY, FLEET_ARGS (JSON),
FLEET_WORKER_ID and, when tracing, TRACEPARENT.
"""

from __future__ import annotations

import os
import subprocess
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from fleet.errors import Cancelled, ConfigError, Permanent
from fleet.jobs import JobContext, register, slot_iso
from fleet.process_tree import ProcessTree
from fleet.schedule import TimingError, parse_duration

_POLL_S = 0.05


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
        env.update(
            FLEET_SCHEDULE=ctx.schedule,
            FLEET_SLOT=slot_iso(ctx.slot),
            FLEET_ATTEMPT=str(ctx.attempt),
            FLEET_IDEMPOTENCY_KEY=ctx.idempotency_key,
            FLEET_ARGS=orjson.dumps(ctx.args).decode(),
            FLEET_WORKER_ID=ctx.worker_id,
        )
        from fleet import telemetry

        traceparent = telemetry.current_traceparent()
        if traceparent:
            env["TRACEPARENT"] = traceparent
        # Own process group and session; the tree is followed too, so that cancellation reaches the
        # descendants that left them (setsid).
        proc = subprocess.Popen(self.argv, env=env, cwd=self.cwd, start_new_session=True)
        tree = ProcessTree(proc.pid)
        with _LIVE_LOCK:
            _LIVE.add(tree)
        try:
            while True:
                try:
                    code = proc.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    tree.track()
                    if ctx.cancelled:
                        tree.terminate(self.kill_after_s, proc.poll)
                        proc.wait()
                        raise Cancelled("command terminated: the attempt was cancelled") from None
        finally:
            if proc.poll() is None:
                tree.terminate(self.kill_after_s, proc.poll)
                proc.wait()
            with _LIVE_LOCK:
                _LIVE.discard(tree)
        if code == 0:
            return
        if code in self.permanent_exit_codes:
            raise Permanent(f"command exited with permanent code {code}")
        raise RuntimeError(f"command exited with code {code}")


# The trees of the commands running now: a worker exiting kills what its stopping did not.
_LIVE: set[ProcessTree] = set()
_LIVE_LOCK = threading.Lock()


def kill_running() -> int:
    """SIGKILL every process of the command jobs still running (a worker exiting before their
    terminations finished); returns how many commands there were."""
    with _LIVE_LOCK:
        trees = list(_LIVE)
    for tree in trees:
        tree.kill()
    return len(trees)


def load_command_jobs(path: str) -> list[CommandJob]:
    """Parse and register the command jobs of a file; ConfigError names the job and field."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"--jobs: cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--jobs: {path} is not valid TOML: {e}") from None
    jobs = [_one(entry, i) for i, entry in enumerate(doc.get("job", []), start=1)]
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
