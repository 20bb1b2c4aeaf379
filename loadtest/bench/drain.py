"""Draining a backlog of due no-op runs with W worker processes: runs/s from the database (first
claim to last finish), database transactions per run, peak RSS and CPU per run. The peers' drains
and the batched pgbench limit run interleaved with fleet's, so drift on a noisy machine hits them
alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from fleet.store.db import connect
from loadtest.bench import limit
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.config import WORKER_FLAGS, Bench
from loadtest.bench.procs import Proc, env_for, fleet_cmd
from loadtest.bench.report import Report, median
from loadtest.bench.server import checkpoint, serves_locally
from loadtest.bench.trial import Contender, Trial, drain_trial

POLL_S = 0.2
OPEN_RUNS = "SELECT EXISTS (SELECT 1 FROM fleet.job_runs WHERE status IN ('pending', 'running')) AS open"
DONE_RUNS = (
    "SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at))::float8 AS s "
    "FROM fleet.job_attempts WHERE outcome = 'done'"
)


class FleetDrain:
    """W fleet-worker processes, --concurrency 100 --claim-batch 100, logs to files. The workers
    reach the database through `worker_url` (a pooler) when given, with `flags` added, and import
    `app`; the backlog is drained when `still_open` finds no open run."""

    backlog_cap: int | None = None

    def __init__(
        self,
        url: str,
        workers: int,
        key: str = "",
        reset: Callable[[psycopg.Connection[Any]], None] = reset_runs,
        vacuum: tuple[str, ...] = ("fleet.job_runs",),
        *,
        worker_url: str | None = None,
        flags: tuple[str, ...] = (),
        label: str = "",
        app: str = "loadtest.bench.jobs",
        still_open: str = OPEN_RUNS,
    ) -> None:
        self.url = url
        self.app = app
        self.still_open = still_open
        self.worker_url = worker_url or url
        self.flags = flags
        self.vacuum = vacuum
        self.processes = workers
        self.key = key or f"fleet.w{workers}"
        self.label = label or f"fleet, {workers} worker{'s' if workers > 1 else ''}"
        self.reset = reset

    def ready(self, bench: Bench) -> bool:
        """Every worker waits for wake-ups in LISTEN; through a transaction-pooling proxy, where no
        session stays in LISTEN, every worker has registered."""
        if self.worker_url == self.url:
            return bench.server.listeners(self.url) >= self.processes
        with connect(self.url, "fleet-bench") as conn:
            row = conn.execute("SELECT count(*) AS n FROM fleet.processes WHERE kind = 'worker'").fetchone()
        return bool(row and row["n"] >= self.processes)

    def trial(self, bench: Bench, n: int) -> Trial:
        with connect(self.url, "fleet-bench") as conn:
            self.reset(conn)
            checkpoint(conn)

        def start() -> list[Proc]:
            return [
                bench.procs.start(
                    fleet_cmd(
                        "fleet-worker",
                        "--app",
                        self.app,
                        "--id",
                        f"bench-{i}",
                        *WORKER_FLAGS,
                        *self.flags,
                    ),
                    env_for(self.worker_url),
                    bench.log(f"drain-{self.key}-{i}"),
                )
                for i in range(self.processes)
            ]

        def load() -> None:
            with connect(self.url, "fleet-bench load") as conn, conn.transaction():
                insert_runs(conn, n)
                conn.execute("SELECT pg_notify('fleet_runs', '')")

        return drain_trial(
            bench,
            self.url,
            start=start,
            ready=lambda: self.ready(bench),
            load=load,
            tables=self.vacuum,
            still_open=self.still_open,
            measure=DONE_RUNS,
            n=n,
            ready_s=60.0 + self.processes,  # many processes start slowly on a few cores
        )


def run(bench: Bench, report: Report) -> None:
    contenders: list[Contender] = []
    if bench.selected("drain"):
        url = bench.server.database("drain")
        with connect(url, "fleet-bench") as conn:
            add_schedule(conn)
        contenders += [FleetDrain(url, w) for w in bench.opts.workers]
        contenders += limit.interleaved(bench)
    if bench.selected("peers"):
        from loadtest.bench import peers  # needs the peers' packages (the bench extra)

        contenders += peers.drain_contenders(bench, report)
    trials: dict[str, list[Trial]] = {c.key: [] for c in contenders}
    for rep in range(bench.opts.repeat):
        for c in contenders:
            t = c.trial(bench, backlog(bench, c))
            trials[c.key].append(t)
            unit = "runs/s" if c.processes else "jobs/s"
            print(f"  drain {c.key} #{rep + 1}: {t.rate:,.0f} {unit}", flush=True)
    for c in contenders:
        if c.processes:
            rates = [t.rate for t in trials[c.key]]
            report.add(
                f"drain.{c.key}",
                f"drain {backlog(bench, c):,} no-op runs: {c.label}",
                median(rates),
                "runs/s",
                trials=rates,
            )
    # This machine's busy CPU includes the server's only when the server runs here.
    local = bool(contenders) and serves_locally(bench.server.url)
    limits = [c for c in contenders if not c.processes]  # the PostgreSQL limit, between the drains
    if limits:
        limit.report_interleaved(
            report,
            {c.key: [t.rate for t in trials[c.key]] for c in limits},
            bench.opts.clients,
            {c.key: [t.busy_us_per_run for t in trials[c.key]] for c in limits} if local else None,
        )
    workers = [c for c in contenders if c.processes]
    _resources(report, workers, trials)
    if local:
        _machine_cpu(report, workers, trials)
    report.note(
        "drain: runs/s = runs / (first start .. last finish) read from the database (fleet: job_attempts "
        "started_at/finished_at; procrastinate: procrastinate_events; pgqueuer: pgqueuer_log), median of "
        "the trials. Every contender's backlog is inserted in one transaction once its workers listen, with "
        "them paused (SIGSTOP), then its table is vacuumed and analysed and the server checkpointed, as for "
        "the limit's pgbench runs, and the workers are resumed at once. fleet workers run "
        f"with {' '.join(WORKER_FLAGS)}, OTEL_TRACES_EXPORTER=none, logs to files; the peers with their "
        "defaults and their logs to files. Trials of all contenders are interleaved"
    )


def backlog(bench: Bench, c: Contender) -> int:
    return min(bench.opts.backlog, c.backlog_cap or bench.opts.backlog)


def _machine_cpu(report: Report, contenders: Sequence[Contender], trials: dict[str, list[Trial]]) -> None:
    """This machine's busy CPU per run (workers, server and all) while each contender drained: the
    cost of a run wherever it goes, which the throughput ratios compare only when the cores are
    saturated."""
    for c in contenders:
        per_trial = [t.busy_us_per_run for t in trials[c.key]]
        report.add(
            f"drain.{c.key}.busy_us_per_run",
            f"this machine's busy CPU per run while draining: {c.label}",
            median(per_trial),
            "us/run",
            trials=per_trial,
        )
    report.note(
        "busy CPU per run: user, system and interrupt time of the whole machine from /proc/stat (idle, "
        "I/O wait and stolen time left out) from the workers' resumption until the backlog was seen "
        "drained (pgbench: over its run), divided by the runs; it includes the server's, the workers' "
        "and the benchmark's own monitoring. Reported when the server runs on this machine"
    )


def _resources(report: Report, contenders: Sequence[Contender], trials: dict[str, list[Trial]]) -> None:
    fleet_keys = [c.key for c in contenders if c.key.startswith("fleet.")]
    for c in contenders:
        ts = trials[c.key]
        if c.key in fleet_keys[1:]:
            continue  # for fleet, the first worker count stands for all
        report.add(
            f"drain.{c.key}.transactions_per_run",
            f"database transactions per run: {c.label}",
            median([t.transactions / t.runs for t in ts]),
            "xact/run",
            trials=[t.transactions / t.runs for t in ts],
        )
        report.add(
            f"drain.{c.key}.cpu_us_per_run",
            f"worker CPU per run (whole process lifetime): {c.label}",
            median([t.cpu_s / t.runs * 1e6 for t in ts]),
            "us/run",
            trials=[t.cpu_s / t.runs * 1e6 for t in ts],
        )
    fleet = [t for c in contenders if c.key.startswith("fleet.") for t in trials[c.key]]
    if fleet:
        report.add(
            "drain.fleet.peak_rss",
            "fleet-worker peak RSS (VmHWM before exit, largest of all drain workers)",
            max(t.peak_rss_kib for t in fleet) / 1024,
            "MiB",
            target="< 60",
            ok=lambda v: v < 60,
        )
    for c in contenders:
        if not c.key.startswith("fleet."):
            report.add(
                f"drain.{c.key}.peak_rss",
                f"peak RSS of one worker process: {c.label}",
                max(t.peak_rss_kib for t in trials[c.key]) / 1024,
                "MiB",
            )
    report.note(
        "transactions per run: pg_stat_database xact_commit + xact_rollback of the trial's database over "
        "the trial (worker start to exit), minus the benchmark's own monitoring transactions, divided by "
        "the runs (pg_stat_statements is not available on the embedded server). A fleet worker sends each "
        "transaction (finish + next claim) as one pipelined round trip, so for fleet this is round trips "
        "per run"
    )
