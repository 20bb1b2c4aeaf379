"""A real fleet for the load test: tickers and workers under supervisord, configured by fleet's own
rendering (fleet.process.supervisor) and driven over its control socket (ops.control).

Everything lives in the work directory: the environment file (database URL, short leases), the
supervisord configuration, the control socket and one log file per process. Stopping is thorough:
supervisord shuts down gracefully, and any process it started that is still alive afterwards is
killed by pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from fleet.ops.control import ProcInfo, Supervisor, SupervisorUnavailable
from fleet.process.envfile import render_env
from fleet.process.supervisor import TICKER_STOPWAIT_S, SupervisorOptions, render
from loadtest.profile import LoadConfig
from loadtest.queries import q

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60.0


@dataclass
class Peak:
    """The highest VmHWM seen for one process."""

    name: str
    pid: int
    kind: str  # worker | ticker
    kb: int = 0


@dataclass
class FleetRun:
    """supervisord with `tickers` tickers and `workers` workers running `loadtest.work`."""

    workdir: Path
    url: str
    cfg: LoadConfig
    proc: subprocess.Popen[bytes] | None = None
    sv: Supervisor | None = None
    seen: dict[int, str] = field(default_factory=dict)  # every pid supervisord ran: name
    peaks: dict[tuple[str, int], Peak] = field(default_factory=dict)
    stopped_pids: set[int] = field(default_factory=set)  # SIGSTOPped by a fault, not yet continued
    # SIGKILLed by a fault: supervisord reports such a process RUNNING until it has reaped it
    killed_pids: set[int] = field(default_factory=set)

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def conf_path(self) -> Path:
        return self.workdir / "supervisord.conf"

    def options(self) -> SupervisorOptions:
        socket = self.workdir / "sv.sock"
        if len(str(socket)) > 100:
            raise RuntimeError(f"--workdir: path too long for a unix socket: {socket}")
        return SupervisorOptions(
            bin_dir=str(Path(sys.executable).parent),
            directory=str(self.workdir),
            workers=self.cfg.workers,
            max_workers=self.cfg.workers,
            tickers=self.cfg.tickers,
            alerts=0,  # the load test declares no alert route: its fleet is tickers and workers
            apps=("loadtest.jobs",),
            env_file=str(self.workdir / "fleet.env"),
            env_allow=("PYTHONPATH",),  # the load test's jobs are imported from the repository
            logs_dir=str(self.logs),
            socket=str(socket),
            pidfile=str(self.workdir / "supervisord.pid"),
            grace_s=self.cfg.grace_s,
        )

    def environment(self) -> dict[str, str]:
        """What every fleet process reads at start (through `fleetctl exec-env`)."""
        c = self.cfg
        return {
            "FLEET_DATABASE_URL": self.url,
            "FLEET_LEASE": f"{c.lease_s:g}",
            "FLEET_HEARTBEAT": f"{c.heartbeat_s:g}",
            "FLEET_POLL": f"{c.poll_s:g}",
            "FLEET_CONCURRENCY": str(c.concurrency),
            "FLEET_CLAIM_BATCH": str(c.claim_batch),
            "FLEET_TICKER_POLL": f"{c.ticker_poll_s:g}",
            "FLEET_LOG_FORMAT": "json",
            "OTEL_TRACES_EXPORTER": "none",
            "PYTHONPATH": str(ROOT),
        }

    # -- start and stop --------------------------------------------------------------------------

    def start(self) -> None:
        """Start supervisord and wait until every ticker and worker is RUNNING."""
        self.logs.mkdir(parents=True, exist_ok=True)
        env_path = self.workdir / "fleet.env"
        fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render_env(self.environment()))
        opts = self.options()
        self.conf_path.write_text(render(opts), encoding="utf-8")
        exe = Path(opts.bin_dir) / "supervisord"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "supervisor.supervisord"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "OTEL_"))}
        # A stop signal is held back while supervisord starts: the load test's handler raises, and
        # raised between the fork and the assignment it would leave supervisord running unknown to
        # stop(). It is delivered once self.proc holds the process (the child unblocks it).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        with open(self.logs / "supervisord.out", "ab") as out:
            self.proc = subprocess.Popen(
                [*cmd, "-n", "-c", str(self.conf_path)],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        self.sv = Supervisor(f"unix://{opts.socket}")
        want = self.cfg.workers + self.cfg.tickers
        end = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                running = [p for p in self.processes() if p.state == "RUNNING"]
            except SupervisorUnavailable:
                running = []
            if len(running) == want:
                return
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(
                    f"the fleet did not start ({len(running)} of {want} RUNNING); see {self.logs}"
                )
            time.sleep(0.2)

    def wait_ready(self, conn: psycopg.Connection[Any]) -> None:
        """Wait until every ticker and worker has registered in the database (supervisord's RUNNING only
        says a process has lived `startsecs`; it may still be importing)."""
        names = [f"ticker_{i:02d}" for i in range(self.cfg.tickers)]
        names += [f"worker_{i:02d}" for i in range(self.cfg.workers)]
        ids = [self.process_id(n) for n in names]
        end = time.monotonic() + START_TIMEOUT_S
        while True:
            row = conn.execute(q("processes_ready"), {"ids": ids}).fetchone()
            if row is not None and row["n"] == len(ids):
                return
            if time.monotonic() > end:
                raise RuntimeError(
                    f"the fleet did not get ready ({row and row['n']} of {len(ids)} registered); "
                    f"see {self.logs}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Graceful shutdown of supervisord and its processes; whatever survives it is killed by pid."""
        proc = self.proc
        if proc is None:
            return
        for pid in list(self.stopped_pids):
            self.cont(pid)
        if proc.poll() is None:
            with contextlib.suppress(SupervisorUnavailable):
                self.processes()
            try:
                assert self.sv is not None
                self.sv.shutdown()
            except Exception:  # noqa: BLE001 - supervisord gone: stop it by its pid instead
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.options().stopwaitsecs + TICKER_STOPWAIT_S + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        left = [pid for pid, name in self.seen.items() if _alive_as(pid, "fleet-")]
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        self.proc = None

    def __enter__(self) -> FleetRun:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what runs -------------------------------------------------------------------------------

    def processes(self) -> list[ProcInfo]:
        assert self.sv is not None
        procs = self.sv.processes()
        for p in procs:
            if p.pid:
                self.seen[p.pid] = p.name
        return procs

    def running(self, kind: str) -> dict[str, int]:
        """RUNNING processes of a kind (worker | ticker): name -> pid (none stopped or killed by a fault)."""
        try:
            procs = self.processes()
        except SupervisorUnavailable:
            return {}
        return {
            p.name: p.pid
            for p in procs
            if p.state == "RUNNING"
            and p.name.startswith(kind + "_")
            and p.pid not in self.stopped_pids
            and p.pid not in self.killed_pids
        }

    @staticmethod
    def process_id(name: str) -> str:
        """The --id fleet's rendering gives a process (`%(host_node_name)s:worker_NN`)."""
        return f"{platform.node()}:{name}"

    def kill_process(self, pid: int) -> None:
        self.killed_pids.add(pid)
        os.kill(pid, signal.SIGKILL)

    def stop_process(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.stopped_pids.add(pid)

    def cont(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
        self.stopped_pids.discard(pid)

    def sample_rss(self) -> None:
        """Note every running process's VmHWM (the kernel's peak resident set for that process)."""
        try:
            procs = self.processes()
        except SupervisorUnavailable:
            return
        for p in procs:
            if not p.pid or p.state not in ("RUNNING", "STARTING"):
                continue
            kb = vm_hwm_kb(p.pid)
            if kb is None:
                continue
            kind = "worker" if p.name.startswith("worker_") else "ticker"
            peak = self.peaks.setdefault((p.name, p.pid), Peak(p.name, p.pid, kind))
            peak.kb = max(peak.kb, kb)


def vm_hwm_kb(pid: int) -> int | None:
    """VmHWM of a process in kB, None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _alive_as(pid: int, text: str) -> bool:
    """Whether `pid` is alive and its command line contains `text` (a reused pid is left alone)."""
    try:
        return text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _die_with_parent() -> None:
    """In supervisord before exec: SIGTERM when the load test dies, so no fleet outlives it (Linux);
    the stop signals the load test held back while starting it are supervisord's to receive."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if sys.platform == "linux":
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
