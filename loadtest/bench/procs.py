"""Processes the benchmark starts: output to a file, CPU time and peak memory read from /proc,
stopped by pid (SIGTERM, then SIGKILL) however the benchmark ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
_TICKS = os.sysconf("SC_CLK_TCK")


def env_for(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a process under test: no inherited FLEET_/OTEL_ settings, tracing off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
    env.update(
        FLEET_DATABASE_URL=database_url,
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


class Proc:
    """One started process; its stdout and stderr go to `log` (never a terminal)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.argv = list(argv)
        self.log = log
        with open(log, "wb") as out:
            # Its own session: a Ctrl-C meant for the benchmark does not stop it mid-measurement;
            # the benchmark stops it itself.
            self.popen = subprocess.Popen(
                self.argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu_s(self) -> float:
        """User plus system CPU time so far, all threads (0 once it has exited)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime

    def peak_rss_kib(self) -> int:
        """VmHWM: the peak resident set size so far (0 once it has exited)."""
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait up to `timeout`, then SIGKILL; returns the exit code."""
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self) -> int:
        if self.alive():
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGKILL)
        return self.popen.wait(10)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Processes:
    """Every process started through it is stopped by `stop_all` (by pid), even after a failure."""

    def __init__(self) -> None:
        self.started: list[Proc] = []

    def start(self, argv: Sequence[str], env: dict[str, str], log: Path) -> Proc:
        p = Proc(argv, env, log)
        self.started.append(p)
        return p

    def check(self, procs: Sequence[Proc]) -> None:
        """Fail with the process's last log lines if any of `procs` has exited."""
        for p in procs:
            if not p.alive():
                raise RuntimeError(
                    f"{Path(p.argv[0]).name} (pid {p.pid}) exited with {p.popen.returncode}; "
                    f"log {p.log}:\n{p.tail()}"
                )

    def stop(self, procs: Sequence[Proc], timeout: float = 30.0) -> None:
        for p in procs:
            p.signal(signal.SIGTERM)
        for p in procs:
            p.stop(timeout)
            if p in self.started:
                self.started.remove(p)

    def stop_all(self) -> None:
        for p in self.started:
            with contextlib.suppress(Exception):
                p.kill()
        self.started.clear()


def fleet_cmd(name: str, *args: str) -> list[str]:
    """A fleet console script of this virtual environment."""
    return [str(BIN / name), *args]
