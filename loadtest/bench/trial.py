"""One drain trial, and what a contender of the drain is: shared by fleet's drain, the batched
pgbench limit and the peers' drains."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from psycopg import sql

from fleet.store.db import connect
from loadtest.bench.config import Bench
from loadtest.bench.procs import Proc
from loadtest.bench.server import busy_cpu_s, checkpoint, settle_stats, wait_until

POLL_S = 0.2


@dataclass(frozen=True)
class Trial:
    runs: int
    seconds: float  # first claim to last finish, from the database
    transactions: int  # the workers' database transactions during the trial
    peak_rss_kib: int  # largest VmHWM among the worker processes, read before they were stopped
    cpu_s: float  # CPU time of the worker processes, all of their lifetime
    busy_s: float = 0.0  # this machine's busy CPU time (all cores) while the backlog drained

    @property
    def rate(self) -> float:
        return self.runs / self.seconds if self.seconds > 0 else float("nan")

    @property
    def busy_us_per_run(self) -> float:
        return self.busy_s / self.runs * 1e6


class Contender(Protocol):
    key: str  # "fleet.w2", "pgqueuer.b100", ...
    label: str
    processes: int  # worker processes; 0 for the pgbench limit, which has no workers to measure
    backlog_cap: int | None  # a smaller backlog for a contender too slow for the full one

    def trial(self, bench: Bench, n: int) -> Trial: ...


def drain_trial(
    bench: Bench,
    url: str,
    *,
    start: Callable[[], list[Proc]],
    ready: Callable[[], bool],
    load: Callable[[], None],
    tables: Sequence[str],
    still_open: str,
    measure: str | Callable[[], tuple[int, float]],
    n: int,
    ready_s: float = 60.0,
) -> Trial:
    """Start the workers and wait until they are `ready`; pause them (SIGSTOP), `load` the backlog
    in one transaction, vacuum and analyse the `tables` it filled and checkpoint, as the limit's
    pgbench runs find their table; resume them (SIGCONT) all at once, wait until nothing is open,
    read RSS and CPU, stop the workers, then read the figures. `still_open` is a query returning one
    row with a boolean `open`; `measure` one with `n`, the runs done, and `s`, the seconds from the
    first start to the last finish (or a function returning both, read after the workers stopped,
    for a peer that keeps no history). The workers get `ready_s` to be ready."""
    procs = start()
    try:
        wait_until(ready, ready_s, "the workers to be ready", procs=bench.procs, watched=procs)
        time.sleep(0.5)
        for p in procs:
            p.signal(signal.SIGSTOP)
        try:
            load()
            with connect(url, "fleet-bench prepare") as conn:
                conn.autocommit = True
                for table in tables:
                    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(*table.split("."))))
                checkpoint(conn)
            settle_stats()
            before = bench.server.transactions(url)
            busy = busy_cpu_s()
        finally:
            for p in procs:
                p.signal(signal.SIGCONT)
        with connect(url, "fleet-bench monitor") as conn:
            own = 1  # the monitor's own transactions, subtracted below; opening a session counts one

            def done() -> bool:
                nonlocal own
                own += 1
                row = conn.execute(still_open).fetchone()
                return bool(row and not row["open"])

            wait_until(done, max(120.0, n / 100), "the backlog to drain", POLL_S, bench.procs, procs)
        busy = busy_cpu_s() - busy
        rss = max(p.peak_rss_kib() for p in procs)
        cpu = sum(p.cpu_s() for p in procs)
    finally:
        bench.procs.stop(procs)
    settle_stats()
    transactions = bench.server.transactions(url) - before - own
    if callable(measure):
        runs, seconds = measure()
    else:
        with connect(url, "fleet-bench") as conn:
            row = conn.execute(measure).fetchone()
        runs, seconds = (int(row["n"]), float(row["s"] or 0)) if row else (0, 0.0)
    if runs != n:
        raise RuntimeError(f"{runs} of {n} runs were done")
    return Trial(runs, seconds, transactions, rss, cpu, busy)
