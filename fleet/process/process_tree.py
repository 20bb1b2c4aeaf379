"""The processes of a command job, kept together so that the job is killed whole.

A command runs under a keeper: a small process (this file, run as a script) that is a child
subreaper, so every process the command starts stays below the keeper, whatever it does (setsid, a
daemonising double fork): an orphan is re-parented to the keeper, not to init. The keeper reaps
them and, when asked, ends them all. The worker also follows the tree through /proc, in case the
keeper itself is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
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
    """A process and every descendant seen so far, each known by pid and start time.

    `track` is called while the command runs: a descendant seen once stays known after its parent
    exits and it is re-parented away from the tree. Below a keeper nothing is re-parented away, and
    every look sees the whole tree. The root's process group is signalled too, unless the root is
    the caller (`spare_root`: the keeper ending its own tree, in which every process is known).
    """

    def __init__(self, root: int, *, spare_root: bool = False) -> None:
        self.root = root
        self.spare_root = spare_root
        self.known: dict[int, int] = {}
        self.root_start = start_time(root)
        if self.root_start is not None:
            self.known[root] = self.root_start
        self.track()

    def root_alive(self) -> bool:
        """Whether the root is still running (not a zombie, not a later process given its pid)."""
        return self.root_start is not None and start_time(self.root) == self.root_start

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
        """Send `sig` to the root's process group and to every known process still alive (the root
        and its group left out with `spare_root`)."""
        if not self.spare_root:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.root, sig)
        for pid, st in list(self.known.items()):
            if pid == self.root and self.spare_root:
                continue
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


# Asking a keeper to end its command's tree: gracefully (SIGTERM to every process of it, SIGKILL to
# what is left after kill_after), or at once (SIGKILL). A worker that dies sends the first: it is the
# keeper's parent-death signal.
END = signal.SIGUSR1
END_NOW = signal.SIGUSR2
# What a keeper waits for. The other signals a process group gets (SIGTERM, SIGINT, SIGHUP: from a
# command's `kill 0`, a terminal) it takes and ignores: the keeper outlives its command, to reap.
_WAITED = (signal.SIGCHLD, END, END_NOW, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def keeper_argv(status_fd: int, kill_after_s: float, argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` under a keeper, a child of the calling process (whose death
    ends the command). The keeper writes one line to `status_fd`, a pipe it inherits: `exit CODE`
    when the command has ended (negative for a signal, as subprocess says), or `error ERRNO` when it
    could not be started. It exits once the command has ended by itself (what the command left
    running is not touched), or once it has ended the whole tree when asked to (END, END_NOW)."""
    return [
        sys.executable,
        "-I",  # none of the command's PYTHON* variables, no user site
        "-S",  # nothing but the standard library: this file imports nothing else
        str(Path(__file__).resolve()),
        str(status_fd),
        repr(kill_after_s),
        str(os.getpid()),
        "--",
        *argv,
    ]


def _keep(args: Sequence[str]) -> int:
    status_fd, kill_after_s, parent, command = int(args[0]), float(args[1]), int(args[2]), list(args[4:])
    os.set_inheritable(status_fd, False)  # the command does not get it
    signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)  # taken by sigwaitinfo, never lost meanwhile
    if not _prctl(_PR_SET_CHILD_SUBREAPER, 1):
        os.write(2, b"fleet: no child subreaper (Linux 3.4 or later): a daemonising command may escape\n")
    _prctl(_PR_SET_PDEATHSIG, END)
    if os.getppid() != parent:
        return 1  # the worker died before the keeper could see it: start nothing
    try:
        # The command starts with every signal unblocked and at its default action (Python ignores
        # SIGPIPE and SIGXFSZ; subprocess puts them back likewise).
        pid = os.posix_spawnp(
            command[0], command, os.environ, setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
        )
    except OSError as e:
        _say(status_fd, f"error {e.errno}")
        return 0
    tree = ProcessTree(os.getpid(), spare_root=True)
    ending_at: float | None = None
    killed = False
    while True:
        left, code = _reap(pid)
        if code is not None:
            _say(status_fd, f"exit {code}")
            if ending_at is None:
                # Ended by itself: what it left is not touched, unless an end was asked for meanwhile.
                asked = _end_asked()
                if asked is None:
                    return 0
                ending_at = time.monotonic() if asked == END_NOW else _ask_to_end(tree, kill_after_s)
        if not left:
            return 0
        if ending_at is not None and not killed and time.monotonic() >= ending_at:
            tree.kill()
            killed = True
        if ending_at is None or killed:
            signo: int | None = signal.sigwaitinfo(_WAITED).si_signo
        else:
            info = signal.sigtimedwait(_WAITED, max(0.0, ending_at - time.monotonic()))
            signo = info.si_signo if info else None
        if killed:
            continue
        if signo == END and ending_at is None:
            ending_at = _ask_to_end(tree, kill_after_s)
        elif signo == END_NOW:
            ending_at = time.monotonic()


def _end_asked() -> int | None:
    """END_NOW or END if one of them is pending (the strongest), else None; takes what is pending."""
    asked = None
    while (info := signal.sigtimedwait(_WAITED, 0)) is not None:
        if info.si_signo == END_NOW or (info.si_signo == END and asked is None):
            asked = info.si_signo
    return asked


def _ask_to_end(tree: ProcessTree, kill_after_s: float) -> float:
    """SIGTERM every process of the tree; returns when to kill what is left."""
    tree.track()
    tree.send(signal.SIGTERM)
    return time.monotonic() + kill_after_s


def _reap(command: int) -> tuple[bool, int | None]:
    """Collect every child that has ended: whether a child is left, and the command's exit code if
    it was among them."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False, code
        if pid == 0:
            return True, code
        if pid == command:
            code = os.waitstatus_to_exitcode(status)


def _say(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):  # the worker is gone
        os.write(fd, f"{line}\n".encode())


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(_keep(sys.argv[1:]))
