"""graphile-worker (Node) beside fleet, at its documented best settings and at its defaults: two
worker processes draining a backlog, a crontab entry every minute, and 1,000 jobs due at the same
instant. The bench installs it with npm in a folder of its own (peer_install) and runs
graphile_app.mjs there."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.store.db import connect
from loadtest.bench import stamps
from loadtest.bench.config import Bench
from loadtest.bench.peer_install import GRAPHILE_WORKER, node, npm_package
from loadtest.bench.peer_procs import HERD, Herd, ProcessFiles, uri, wait_stamps
from loadtest.bench.procs import Proc, env_for
from loadtest.bench.server import checkpoint
from loadtest.bench.trial import Trial, drain_trial

NAME = "graphile-worker"
APP = Path(__file__).resolve().parent / "graphile_app.mjs"
PROCESSES = 2
CRONTAB = "* * * * * stamp"  # its finest crontab: once a minute
LAG_FIRINGS = 3  # minutes of the crontab measured (one in --quick)
JOBS = "graphile_worker._private_jobs"
ADD_JOBS = (
    "SELECT count(*) FROM graphile_worker.add_jobs(array("
    "    SELECT ROW(%(task)s, %(payload)s::json, NULL, to_timestamp(%(at)s::float8), NULL, NULL, NULL, NULL)"
    "           ::graphile_worker.job_spec"
    "    FROM generate_series(1, %(n)s)))"
)


@dataclass(frozen=True)
class Setting:
    name: str  # "best" or "defaults", the last part of the figures' keys
    text: str  # printed in each figure's label
    worker: dict[str, Any]  # the preset's `worker` options
    backlog_cap: int | None  # a smaller backlog where the full one would take minutes


# https://worker.graphile.org/docs/performance: the configuration of its published figures.
BEST = Setting(
    "best",
    "best: concurrentJobs 24, maxPoolSize 25, localQueue.size 500, completeJobBatchDelay 0, "
    "failJobBatchDelay 0",
    {
        "concurrentJobs": 24,
        "maxPoolSize": 25,
        "localQueue": {"size": 500},
        "completeJobBatchDelay": 0,
        "failJobBatchDelay": 0,
    },
    None,
)
DEFAULTS = Setting(
    "defaults",
    "defaults: concurrentJobs 1, maxPoolSize 10, pollInterval 2000 ms, no local queue, "
    "completion not batched",
    {},
    30_000,
)
SETTINGS = (BEST, DEFAULTS)


class Graphile:
    """The installed graphile-worker and the app beside it."""

    def __init__(self) -> None:
        self.node = node()  # PeerUnavailable, saying what is missing, before anything else
        self.folder = npm_package(NAME, GRAPHILE_WORKER)
        self.app = self.folder / APP.name
        shutil.copyfile(APP, self.app)  # `import "graphile-worker"` resolves from the app's folder

    def env(self, url: str, setting: Setting, **extra: str) -> dict[str, str]:
        return env_for(url, DATABASE_URL=uri(url), GW_WORKER=json.dumps(setting.worker), **extra)

    def argv(self, mode: str) -> list[str]:
        return [self.node, str(self.app), mode]

    def install(self, bench: Bench, suffix: str) -> str:
        """A fresh database with graphile-worker's schema, made by its own migrations."""
        url = bench.server.database(suffix, fleet_schema=False)
        done = subprocess.run(
            self.argv("migrate"),
            env=self.env(url, DEFAULTS),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"graphile-worker migrate failed:\n{done.stdout}\n{done.stderr}")
        return url

    def start(
        self, bench: Bench, url: str, setting: Setting, files: ProcessFiles, name: str, n: int, **extra: str
    ) -> list[Proc]:
        return [
            bench.procs.start(
                self.argv("run"), self.env(url, setting, **files.env(i), **extra), bench.log(f"{name}-{i}")
            )
            for i in range(n)
        ]


def add_jobs(url: str, n: int, at: float | None = None) -> None:
    """`n` no-op jobs in one transaction through graphile-worker's own add_jobs, or `n` jobs of the
    `at` task due at the Unix instant `at`."""
    params = {"task": "noop" if at is None else "at", "payload": json.dumps({} if at is None else {"at": at})}
    with connect(url, "fleet-bench load") as conn, conn.transaction():
        conn.execute(ADD_JOBS, {**params, "at": at, "n": n})


class GraphileDrain:
    """Two graphile-worker processes at one setting."""

    processes = PROCESSES

    def __init__(self, peer: Graphile, url: str, setting: Setting) -> None:
        self.peer = peer
        self.url = url
        self.setting = setting
        self.backlog_cap = setting.backlog_cap
        self.key = f"graphile_worker.{setting.name}"
        self.label = f"{NAME} {GRAPHILE_WORKER}, {PROCESSES} workers, {setting.text}"

    def trial(self, bench: Bench, n: int) -> Trial:
        with connect(self.url, "fleet-bench") as conn:
            conn.execute(
                "TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues CASCADE"
            )
            conn.execute("VACUUM ANALYZE graphile_worker._private_jobs")
            checkpoint(conn)
        files = ProcessFiles(bench, f"drain-{self.key}", PROCESSES)
        return drain_trial(
            bench,
            self.url,
            start=lambda: self.peer.start(
                bench, self.url, self.setting, files, f"drain-{self.key}", PROCESSES
            ),
            ready=files.all_ready,
            load=lambda: add_jobs(self.url, n),
            tables=(JOBS,),
            still_open="SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS open",
            measure=files.measure,
            n=n,
        )


def drain_contenders(bench: Bench) -> list[GraphileDrain]:
    peer = Graphile()
    url = peer.install(bench, "graphile")
    return [GraphileDrain(peer, url, s) for s in SETTINGS]


def lags(bench: Bench) -> dict[str, list[float]]:
    """Per setting, slot-to-handler-start lags (s) of a crontab entry every minute, one worker
    process each, both settings side by side in databases of their own."""
    peer = Graphile()
    firings = 1 if bench.opts.quick else LAG_FIRINGS
    started: list[tuple[Setting, ProcessFiles, list[Proc]]] = []
    try:
        for s in SETTINGS:
            url = peer.install(bench, f"graphile_lag_{s.name}")
            files = ProcessFiles(bench, f"lag-graphile_worker.{s.name}", 1)
            started.append(
                (
                    s,
                    files,
                    peer.start(bench, url, s, files, f"lag-graphile_worker.{s.name}", 1, GW_CRONTAB=CRONTAB),
                )
            )
        procs = [p for _, _, ps in started for p in ps]
        wait_stamps(bench, procs, [f.stamps for _, f, _ in started], firings, 60.0 * (firings + 1) + 30)
    finally:
        bench.procs.stop([p for _, _, ps in started for p in ps])
    return {s.name: [start - slot for slot, start, _ in stamps.read(f.stamps)] for s, f, _ in started}


def lag_label(setting: str) -> str:
    (s,) = [s for s in SETTINGS if s.name == setting]
    return f"{NAME} {GRAPHILE_WORKER}, 1 worker, {s.text}"


def herds(bench: Bench) -> list[Herd]:
    """The herd's contenders: HERD jobs whose run_at is one instant, two processes per setting."""
    peer = Graphile()
    out = []
    for s in SETTINGS:
        url = peer.install(bench, f"graphile_herd_{s.name}")

        def start(files: ProcessFiles, url: str = url, s: Setting = s) -> list[Proc]:
            return peer.start(bench, url, s, files, f"herd-graphile_worker.{s.name}", PROCESSES)

        def add(slot: float, url: str = url) -> None:
            with connect(url, "fleet-bench") as conn:
                conn.execute(
                    "TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues CASCADE"
                )
            add_jobs(url, HERD, slot)

        label = f"{NAME} {GRAPHILE_WORKER}, {PROCESSES} workers, {s.text}"
        out.append(Herd(f"graphile_worker.{s.name}", label, start, add, PROCESSES))
    return out
