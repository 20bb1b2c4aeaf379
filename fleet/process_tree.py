"""The processes a command started, followed through /proc, so that a command job is killed whole:
with the descendants that left its process group or session (setsid, a daemonising double fork)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

_PROC = Path("/proc")
_FREEZE_ROUNDS = 20


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None once it is gone or a zombie: with
    the pid it names one process, never a later one given the same pid."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def children(pid: int) -> list[int]:
    """The process's children now (of all its threads); none once it is gone."""
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            found.extend(int(c) for c in (_PROC / str(pid) / "task" / tid / "children").read_bytes().split())
        except FileNotFoundError:
            if not (_PROC / str(pid) / "task" / tid).exists():
                continue
            return _children_by_scan(pid)  # a kernel without the children files
        except OSError:
            continue
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for entry in os.listdir(_PROC):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (_PROC / entry / "stat").read_bytes()
                if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                    found.append(int(entry))
    return found


class ProcessTree:
    """A command's process and every descendant seen so far, each known by pid and start time.

    `track` is called while the command runs: a descendant seen once stays known after its parent
    exits and it is re-parented away from the tree (a process that detaches before any look misses
    it; only a cgroup would not). The root's process group is signalled too.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.known: dict[int, int] = {}
        st = start_time(root)
        if st is not None:
            self.known[root] = st
        self.track()

    def track(self) -> None:
        """Forget the processes that ended; add the descendants alive now of every known one."""
        alive = {pid: st for pid, st in self.known.items() if start_time(pid) == st}
        todo = list(alive)
        seen: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            for c in children(pid):
                if c not in alive:
                    st = start_time(c)
                    if st is None:
                        continue
                    alive[c] = st
                todo.append(c)
        self.known = alive

    def alive(self) -> bool:
        """Whether a process of the tree is still running (zombies have ended)."""
        self.track()
        return bool(self.known)

    def send(self, sig: int) -> None:
        """Send `sig` to the root's process group and to every known process still alive."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root, sig)
        for pid, st in list(self.known.items()):
            if start_time(pid) == st:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def terminate(self, kill_after_s: float, reap: Callable[[], object]) -> None:
        """SIGTERM the whole tree; SIGKILL what is left after `kill_after_s` seconds. `reap` collects
        the root's exit status (a zombie root would keep its group alive)."""
        self.track()
        self.send(signal.SIGTERM)
        end = time.monotonic() + kill_after_s
        while time.monotonic() < end:
            reap()
            if not self.alive():
                return
            time.sleep(0.02)
        self.kill()

    def kill(self) -> None:
        """SIGKILL the whole tree. Everything is stopped first, and looked at again until no new
        child appears: a stopped process cannot fork, so none escapes between the look and the kill."""
        for _ in range(_FREEZE_ROUNDS):
            self.track()
            before = set(self.known)
            self.send(signal.SIGSTOP)
            self.track()
            if set(self.known) <= before:
                break
        self.send(signal.SIGKILL)  # stopped processes too
