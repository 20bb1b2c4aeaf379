"""A command's process tree: followed through /proc (descendants that left its session, or whose
parent exited, are still known and killed), and kept below a keeper (a daemonising double fork
stays in it, is ended with it and reaped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.process.process_tree import END, END_NOW, ProcessTree, keeper_argv, start_time
from tests.support import wait_for


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """Pids a test started; any still alive at its end is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)


def sees(tree: ProcessTree, pid: int) -> bool:
    tree.track()
    return pid in tree.known


def tracked(tree: ProcessTree) -> int:
    tree.track()
    return len(tree.known)


def test_a_detached_grandchild_whose_parent_exited_is_still_killed(
    tmp_path: Path, leftovers: list[int]
) -> None:
    # The command starts a grandchild in a session of its own, then the process between them exits
    # (after a look at the tree): the grandchild is re-parented away, as a daemonising fork does.
    gc_file = tmp_path / "gc"
    script = f"(setsid sh -c 'echo $$ > {gc_file}; exec sleep 300' & sleep 0.5) ; sleep 300"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    leftovers.append(proc.pid)
    tree = ProcessTree(proc.pid)
    wait_for(lambda: gc_file.exists() and gc_file.read_text().strip(), what="the grandchild")
    gc = int(gc_file.read_text())
    leftovers.append(gc)
    wait_for(lambda: sees(tree, gc), what="the grandchild to be seen")
    first_parent = _parent(gc)
    wait_for(lambda: _parent(gc) != first_parent, what="the grandchild to be re-parented")
    assert os.getsid(gc) != os.getsid(proc.pid) and sees(tree, gc)
    tree.kill()
    proc.wait(5)
    wait_for(lambda: not tree.alive(), timeout=5, what="every process of the tree to end")
    assert start_time(gc) is None


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def test_terminate_asks_first_and_kills_what_ignores_it(leftovers: list[int]) -> None:
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"], start_new_session=True)
    leftovers.append(proc.pid)
    tree = ProcessTree(proc.pid)
    wait_for(lambda: tracked(tree) == 2, what="the shell and its sleep")
    leftovers.extend(tree.known)
    tree.terminate(0.3, proc.poll)  # the shell ignores SIGTERM: killed after 0.3 s
    assert proc.wait(5) == -signal.SIGKILL
    wait_for(lambda: not tree.alive(), timeout=5, what="every process of the tree to end")


# A command that daemonises a `sleep 1000` with a double fork: a subshell starts it in a session of
# its own (setsid) and exits at once, so it is an orphan before anything can look at it; it writes
# its pid to the file `gc`.
DAEMONISE = "( setsid sh -c 'echo $$ > gc; exec sleep 1000' & ) ; "


class Kept:
    """A command run by this test under a keeper (in `cwd`), with the keeper's status pipe."""

    def __init__(self, cwd: Path, script: str, kill_after_s: float = 0.5) -> None:
        self.cwd = cwd
        r, w = os.pipe()
        self.status_fd = r
        self.keeper = subprocess.Popen(
            keeper_argv(w, kill_after_s, ["sh", "-c", script]),
            cwd=cwd,
            pass_fds=(w,),
            start_new_session=True,
        )
        os.close(w)

    def grandchild(self) -> tuple[int, int]:
        return daemonised(self.cwd)

    def status(self) -> str:
        """The keeper's line, once it has exited."""
        self.keeper.wait(10)
        with open(self.status_fd, "rb") as f:
            return f.read().decode()


def daemonised(cwd: Path) -> tuple[int, int]:
    """The pid and start time of the sleep that DAEMONISE started in `cwd`."""
    f = cwd / "gc"
    wait_for(lambda: f.exists() and f.read_text().strip(), what="the daemonised grandchild")
    pid = int(f.read_text())
    st = start_time(pid)
    assert st is not None
    return pid, st


def reaped(pid: int, st: int) -> bool:
    """Whether process `pid` started at `st` has ended and been reaped: not even a zombie is left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return int(stat[stat.rindex(b")") + 2 :].split()[19]) != st  # a later process given its pid


def kill_if_alive(found: list[tuple[int, int]]) -> None:
    for pid, st in found:
        if start_time(pid) == st:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def started() -> Iterator[list[tuple[int, int]]]:
    """(pid, start time) of processes a test started; those still alive at its end are killed."""
    found: list[tuple[int, int]] = []
    yield found
    kill_if_alive(found)


def test_a_daemonised_grandchild_stays_below_the_keeper_and_ends_with_the_tree(
    tmp_path: Path, started: list[tuple[int, int]]
) -> None:
    kept = Kept(tmp_path, DAEMONISE + "exec sleep 300")
    gc = kept.grandchild()
    started.append(gc)
    assert _parent(gc[0]) == kept.keeper.pid and os.getsid(gc[0]) != kept.keeper.pid
    kept.keeper.send_signal(END)
    assert kept.status() == "exit -15\n" and kept.keeper.returncode == 0
    assert reaped(*gc)


def test_what_ignores_sigterm_is_killed_after_kill_after(
    tmp_path: Path, started: list[tuple[int, int]]
) -> None:
    kept = Kept(tmp_path, "trap '' TERM; " + DAEMONISE + "exec sleep 300", kill_after_s=0.3)
    gc = kept.grandchild()
    started.append(gc)
    asked = time.monotonic()
    kept.keeper.send_signal(END)
    assert kept.status() == "exit -9\n"
    assert time.monotonic() - asked >= 0.3
    assert reaped(*gc)


def test_end_now_kills_the_tree_at_once(tmp_path: Path, started: list[tuple[int, int]]) -> None:
    kept = Kept(tmp_path, "trap '' TERM; " + DAEMONISE + "exec sleep 300", kill_after_s=60)
    gc = kept.grandchild()
    started.append(gc)
    kept.keeper.send_signal(END)  # a graceful end, cut short
    kept.keeper.send_signal(END_NOW)
    assert kept.status() == "exit -9\n"
    assert reaped(*gc)


def test_signals_to_the_commands_process_group_leave_the_keeper_running(tmp_path: Path) -> None:
    # `kill 0` (a script's clean-up idiom) and a terminal's signals reach the whole group.
    kept = Kept(tmp_path, "kill -HUP 0; kill -INT 0; kill -TERM 0; sleep 300")
    assert kept.status() == "exit -1\n" and kept.keeper.returncode == 0


def test_a_command_that_ends_by_itself_leaves_what_it_started(
    tmp_path: Path, started: list[tuple[int, int]]
) -> None:
    kept = Kept(tmp_path, DAEMONISE + "exit 7")
    assert kept.status() == "exit 7\n"
    gc = kept.grandchild()
    started.append(gc)
    assert start_time(gc[0]) == gc[1]


def test_a_command_that_cannot_start_is_reported(tmp_path: Path) -> None:
    r, w = os.pipe()
    keeper = subprocess.Popen(keeper_argv(w, 1, [str(tmp_path / "missing")]), pass_fds=(w,))
    os.close(w)
    assert keeper.wait(10) == 0
    with open(r, "rb") as f:
        assert f.read() == b"error 2\n"


def test_the_keeper_ends_the_tree_when_its_parent_dies(
    tmp_path: Path, started: list[tuple[int, int]]
) -> None:
    # The keeper's parent (a worker) is killed: its parent-death signal asks it to end the tree.
    launcher = (
        "import os, subprocess, sys, time\n"
        "from fleet.process.process_tree import keeper_argv\n"
        "r, w = os.pipe()\n"
        f"argv = keeper_argv(w, 0.5, ['sh', '-c', {DAEMONISE + 'exec sleep 300'!r}])\n"
        "k = subprocess.Popen(argv, pass_fds=(w,), start_new_session=True)\n"
        "open('keeper', 'w').write(str(k.pid))\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], cwd=tmp_path)
    started.append((parent.pid, start_time(parent.pid) or 0))
    gc = daemonised(tmp_path)
    started.append(gc)
    keeper = int((tmp_path / "keeper").read_text())
    keeper_st = start_time(keeper)
    assert keeper_st is not None
    started.append((keeper, keeper_st))
    parent.kill()
    parent.wait(10)
    wait_for(lambda: reaped(*gc), timeout=10, what="the grandchild to be ended and reaped")
    wait_for(lambda: start_time(keeper) != keeper_st, timeout=10, what="the keeper to exit")
