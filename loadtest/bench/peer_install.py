"""The peers that are not packages of this environment, installed by the benchmark itself at pinned
versions, each in a folder of its own outside the repository: graphile-worker with npm, DBOS
Transact in a virtual environment. A folder is made once and reused while its version stays."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GRAPHILE_WORKER = "0.18.0"
DBOS = "3.4.0"
DIR_ENV = "FLEET_BENCH_PEERS_DIR"
INSTALL_TIMEOUT_S = 600
DONE = ".installed"  # written last: a folder without it is an interrupted install, made again


class PeerUnavailable(RuntimeError):
    """A peer cannot be installed on this machine: what it needs (Node.js and npm, say) is missing."""


def peers_dir() -> Path:
    """Where the peers are installed: $FLEET_BENCH_PEERS_DIR, else the user's cache folder."""
    if path := os.environ.get(DIR_ENV):
        return Path(path)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "fleet-bench" / "peers"


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One installer at a time per folder (two benchmark runs may start together)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], cwd: Path, what: str) -> None:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )


def node() -> str:
    """The `node` executable, or PeerUnavailable saying what to install."""
    path = shutil.which("node")
    if path is None or shutil.which("npm") is None:
        raise PeerUnavailable("Node.js and npm are not installed (apt-get install nodejs npm)")
    return path


def npm_package(name: str, version: str) -> Path:
    """A folder whose node_modules holds `name`@`version` (npm install, once)."""
    node()
    folder = peers_dir() / f"{name}-{version}"
    with _locked(folder):
        if not (folder / DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            (folder / "package.json").write_text('{"private": true}\n')
            npm = str(shutil.which("npm"))
            argv = [npm, "install", "--no-audit", "--no-fund", "--save-exact", f"{name}@{version}"]
            _run(argv, folder, f"npm install {name}@{version}")
            (folder / DONE).write_text(f"{name}@{version}\n")
    return folder


def venv_package(name: str, version: str) -> Path:
    """The Python of a virtual environment holding `name`==`version` (pip install, once)."""
    folder = peers_dir() / f"{name}-{version}"
    python = folder / "bin" / "python"
    with _locked(folder):
        if not (folder / DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(folder)], folder.parent, f"venv for {name}")
            _run(
                [str(python), "-m", "pip", "install", "-q", f"{name}=={version}"],
                folder,
                f"pip install {name}",
            )
            (folder / DONE).write_text(f"{name}=={version}\n")
    return python
