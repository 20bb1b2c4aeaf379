"""What one benchmark run measures (its options) and what it holds while it runs (server, processes)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from loadtest.bench.procs import Processes
from loadtest.bench.server import Server

SECTIONS = (
    "limit",
    "drain",
    "lag",
    "herd",
    "sustained",
    "claimers",
    "ticker",
    "million",
    "history",
    "reclaim",
    "async",
    "jobsets",
    "cost",
    "metrics",
    "retention",
    "health",
    "verify",
    "dashboard",
    "peers",
)
# The peers, measured within the drain and the lag when "peers" is selected (--peers picks some).
PEERS = ("pgqueuer", "procrastinate", "graphile-worker", "dbos")
# Left out of --quick unless named with --only: they take minutes even at the quick sizes.
SLOW_SECTIONS = ("million", "history", "peers", "sustained")

# The worker flags every fleet measurement uses (the issue's, equal to the defaults for --claim-batch).
WORKER_FLAGS = ("--concurrency", "100", "--claim-batch", "100")
BATCH = 100  # runs per claim, and rows per claim in the batched pgbench script


@dataclass(frozen=True)
class Options:
    sections: tuple[str, ...]
    quick: bool
    repeat: int
    backlog: int  # due no-op runs per drain trial
    workers: tuple[int, ...]  # fleet-worker process counts for the drain
    clients: tuple[int, ...]  # pgbench client counts
    lag_s: float  # how long the every-second schedule runs
    burst_s: float  # how long the 1,000-schedule test runs (bursts every 10 s)
    schedules: int  # schedules for the ticker's rate and CPU
    ticker_cpu_s: float  # how long the ticker's CPU is sampled
    history_rows: int  # finished rows under the drain in the history variant
    kills: int  # SIGKILLs in the reclaim test
    lease_s: float  # lease in the reclaim test
    retention_rows: int  # old finished runs the retention pass removes under load
    herd: int = 100_000  # schedules due in the same second (herd)
    sustained: int = 100_000  # schedules every minute (sustained)
    sustained_minutes: int = 10  # whole minutes measured (sustained)
    claimers: tuple[int, ...] = (4, 16, 64)  # worker processes draining one backlog (claimers)
    million: int = 1_000_000  # hourly schedules (million)
    million_s: int = 600  # seconds the ticker is measured over them (million)
    peers: tuple[str, ...] = PEERS  # which peers the "peers" section measures
    strict: bool = False  # a peer that cannot be installed fails the run instead of being left out


def options(
    sections: tuple[str, ...],
    quick: bool,
    repeat: int | None,
    backlog: int | None,
    workers: tuple[int, ...],
    *,
    herd: int | None = None,
    sustained: int | None = None,
    sustained_minutes: int | None = None,
    claimers: tuple[int, ...] = (4, 16, 64),
    million: int | None = None,
    million_s: int | None = None,
    peers: tuple[str, ...] = PEERS,
    strict: bool = False,
) -> Options:
    """Full sizes, or the --quick ones (a smoke test: one repetition, short runs)."""
    return Options(
        sections=sections,
        quick=quick,
        repeat=repeat if repeat is not None else (1 if quick else 3),
        # The drains and the limit's pgbench runs work through backlogs of one size: 200,000 runs
        # take each contender several seconds, which one hiccup of a shared machine does not decide.
        backlog=backlog if backlog is not None else (10_000 if quick else 200_000),
        workers=workers,
        clients=(2, 4, 8),
        # Two minutes of the every-second schedule: over the 28 slots of 30 s a p99 lies between the
        # two largest lags, so one late slot decided it.
        lag_s=8.0 if quick else 120.0,
        burst_s=12.0 if quick else 35.0,
        schedules=2_000 if quick else 10_000,
        ticker_cpu_s=62.0 if quick else 122.0,
        history_rows=500_000 if quick else 20_000_000,
        kills=5 if quick else 20,
        lease_s=2.0,
        retention_rows=300_000 if quick else 2_000_000,
        herd=herd if herd is not None else (5_000 if quick else 100_000),
        sustained=sustained if sustained is not None else (5_000 if quick else 100_000),
        sustained_minutes=sustained_minutes if sustained_minutes is not None else (2 if quick else 10),
        claimers=claimers,
        million=million if million is not None else (20_000 if quick else 1_000_000),
        million_s=million_s if million_s is not None else (60 if quick else 600),
        peers=peers,
        strict=strict,
    )


class Bench:
    """The run's shared state: options, the server with its scratch databases, started processes."""

    def __init__(self, opts: Options, server: Server, log_dir: Path | None = None) -> None:
        self.opts = opts
        self.server = server
        self.procs = Processes()
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="fleet-bench-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def selected(self, section: str) -> bool:
        return section in self.opts.sections

    def log(self, name: str) -> Path:
        """A log file for one process (overwritten by the next trial that uses the same name)."""
        return self.log_dir / f"{name}.log"

    def close(self) -> None:
        self.procs.stop_all()
        self.server.drop_all()
