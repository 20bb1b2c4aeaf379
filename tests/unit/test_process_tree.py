"""A command's process tree, followed through /proc: descendants that left its session, or whose
parent exited, are still known and killed."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.process_tree import ProcessTree, start_time
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
