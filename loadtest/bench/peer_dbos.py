"""DBOS Transact beside fleet, at its best setting (its queue polled every 10 ms) and at its
defaults (polled every second): two processes draining a queue, an every-second schedule, and
1,000 workflows due at the same instant. The bench makes DBOS a virtual environment of its own
(peer_install) and runs dbos_app.py with its Python."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from fleet.store.db import connect
from loadtest.bench import stamps
from loadtest.bench.config import Bench
from loadtest.bench.peer_install import DBOS, venv_package
from loadtest.bench.peer_procs import HERD, Herd, ProcessFiles, uri, wait_stamps
from loadtest.bench.procs import Proc, env_for
from loadtest.bench.server import checkpoint
from loadtest.bench.trial import Trial, drain_trial

NAME = "DBOS Transact"
APP = Path(__file__).resolve().parent / "dbos_app.py"
PROCESSES = 2
# The herd's workflows are enqueued by a new process, one client call each in one transaction:
# a few seconds on a busy machine.
HERD_LEAD_S = 15.0
OPEN = "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING', 'DELAYED')) AS open"


@dataclass(frozen=True)
class Setting:
    name: str
    text: str  # printed in each figure's label
    poll_s: float | None  # the bench queue's polling interval; None: DBOS's default
    worker_concurrency: int | None  # workflows of the queue one process runs at once; None: no limit
    backlog_cap: int  # far slower than fleet: the full backlog would take minutes per trial
    schedule_queue: str  # where the every-second schedule enqueues: "bench" or DBOS's "internal" queue


# Without a per-process limit (worker_concurrency, which DBOS leaves unset), one process dequeues
# the whole backlog at its first poll and starts a thread per workflow, all waiting on its pool of
# 20 connections: at 30,000 they time out and the drain stalls; at 5,000 they drain. A limit of 16
# drains 30,000 but at less than half the rate of no limit on 5,000, so both settings leave it unset
# and drain 5,000.
BEST = Setting("best", "best: queue polling_interval_sec 0.01 (backlog 5,000)", 0.01, None, 5_000, "bench")
DEFAULTS = Setting(
    "defaults", "defaults: queue polling_interval_sec 1.0 (backlog 5,000)", None, None, 5_000, "internal"
)
SCHEDULE_TEXT = {
    "bench": "the schedule enqueues on that queue",
    "internal": "the schedule enqueues on DBOS's internal queue (polled every second)",
}
SETTINGS = (BEST, DEFAULTS)


class Dbos:
    """DBOS's virtual environment and the app run with its Python."""

    def __init__(self) -> None:
        self.python = venv_package("dbos", DBOS)

    def env(self, url: str, setting: Setting, **extra: str) -> dict[str, str]:
        env = env_for(url, DATABASE_URL=uri(url), **extra)
        env.pop("PYTHONPATH", None)  # nothing of fleet in DBOS's environment
        if setting.poll_s is not None:
            env["DBOS_QUEUE_POLL_S"] = str(setting.poll_s)
        if setting.worker_concurrency is not None:
            env["DBOS_WORKER_CONCURRENCY"] = str(setting.worker_concurrency)
        return env

    def run(self, url: str, *args: str) -> None:
        done = subprocess.run(
            [str(self.python), str(APP), *args],
            env=self.env(url, DEFAULTS),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"dbos_app.py {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )

    def install(self, bench: Bench, suffix: str) -> str:
        """A fresh database with DBOS's system tables, made by DBOS at launch."""
        url = bench.server.database(suffix, fleet_schema=False)
        self.run(url, "migrate")
        return url

    def start(
        self, bench: Bench, url: str, setting: Setting, files: ProcessFiles, name: str, n: int, **extra: str
    ) -> list[Proc]:
        argv = [str(self.python), str(APP), "run"]
        return [
            bench.procs.start(argv, self.env(url, setting, **files.env(i), **extra), bench.log(f"{name}-{i}"))
            for i in range(n)
        ]


class DbosDrain:
    """Two DBOS processes serving one queue of no-op workflows at one setting."""

    processes = PROCESSES

    def __init__(self, peer: Dbos, url: str, setting: Setting) -> None:
        self.peer = peer
        self.url = url
        self.setting = setting
        self.backlog_cap: int | None = setting.backlog_cap
        self.key = f"dbos.{setting.name}"
        self.label = f"{NAME} {DBOS}, {PROCESSES} workers, {setting.text}"

    def trial(self, bench: Bench, n: int) -> Trial:
        with connect(self.url, "fleet-bench") as conn:
            conn.execute("TRUNCATE dbos.workflow_status CASCADE")
            conn.execute("VACUUM ANALYZE dbos.workflow_status")
            checkpoint(conn)
        files = ProcessFiles(bench, f"drain-{self.key}", PROCESSES)
        return drain_trial(
            bench,
            self.url,
            start=lambda: self.peer.start(
                bench, self.url, self.setting, files, f"drain-{self.key}", PROCESSES
            ),
            ready=files.all_ready,
            load=lambda: self.peer.run(self.url, "enqueue", str(n)),
            tables=("dbos.workflow_status",),
            still_open=OPEN,
            measure=files.measure,
            n=n,
        )


def drain_contenders(bench: Bench) -> list[DbosDrain]:
    peer = Dbos()
    # A database per setting: a queue's settings live in its database, and None changes none of them.
    return [DbosDrain(peer, peer.install(bench, f"dbos_{s.name}"), s) for s in SETTINGS]


def lags(bench: Bench) -> dict[str, list[float]]:
    """Per setting, slot-to-handler-start lags (s) of an every-second schedule served by one
    process, both settings side by side in databases of their own, for the lag section's time."""
    peer = Dbos()
    started: list[tuple[Setting, ProcessFiles, list[Proc]]] = []
    try:
        for s in SETTINGS:
            url = peer.install(bench, f"dbos_lag_{s.name}")
            files = ProcessFiles(bench, f"lag-dbos.{s.name}", 1)
            procs = peer.start(bench, url, s, files, f"lag-dbos.{s.name}", 1, DBOS_SCHEDULE=s.schedule_queue)
            started.append((s, files, procs))
        procs = [p for _, _, ps in started for p in ps]
        # the section's window, counted in firings once the schedule fires
        firings = max(2, int(bench.opts.lag_s))
        wait_stamps(bench, procs, [f.stamps for _, f, _ in started], firings, bench.opts.lag_s + 60)
    finally:
        bench.procs.stop([p for _, _, ps in started for p in ps])
    return {s.name: [start - slot for slot, start, _ in stamps.read(f.stamps)] for s, f, _ in started}


def lag_label(setting: str) -> str:
    (s,) = [s for s in SETTINGS if s.name == setting]
    return f"{NAME} {DBOS}, 1 worker, {s.text}, {SCHEDULE_TEXT[s.schedule_queue]}"


def herds(bench: Bench) -> list[Herd]:
    """The herd's contenders: HERD workflows enqueued with the delay that makes them due at one
    instant, two processes per setting."""
    peer = Dbos()
    out = []
    for s in SETTINGS:
        url = peer.install(bench, f"dbos_herd_{s.name}")

        def start(files: ProcessFiles, url: str = url, s: Setting = s) -> list[Proc]:
            return peer.start(bench, url, s, files, f"herd-dbos.{s.name}", PROCESSES)

        def add(slot: float, url: str = url) -> None:
            peer.run(url, "enqueue", str(HERD), repr(slot))

        label = f"{NAME} {DBOS}, {PROCESSES} workers, {s.text}"
        out.append(Herd(f"dbos.{s.name}", label, start, add, PROCESSES, HERD_LEAD_S))
    return out
