"""The peers beside fleet (the "peers" section, measured within the drain and the lag): which of them
run (--peers), and one that cannot be installed here, left out with a note, or failing the run
under --strict. pgqueuer and procrastinate are packages of the bench extra; graphile-worker and
DBOS Transact are installed by the benchmark itself (peer_install)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from loadtest.bench import stamps
from loadtest.bench.config import PEERS, Bench
from loadtest.bench.peer_install import PeerUnavailable
from loadtest.bench.peer_procs import HERD, Herd, herd_trial
from loadtest.bench.report import Report, median
from loadtest.bench.trial import Contender

T = TypeVar("T")

# Name on the command line (config.PEERS, in the order of the drain's interleaved trials) -> module.
MODULES = {
    "pgqueuer": "loadtest.bench.peer_pgqueuer",
    "procrastinate": "loadtest.bench.peer_procrastinate",
    "graphile-worker": "loadtest.bench.peer_graphile",
    "dbos": "loadtest.bench.peer_dbos",
}
assert tuple(MODULES) == PEERS


def _module(name: str) -> Any:
    return importlib.import_module(MODULES[name])


def _available(bench: Bench, report: Report, name: str, make: Callable[[Bench], T]) -> T | None:
    """What `make(bench)` returns, or None (and a note) when the peer cannot be installed here;
    under --strict that fails the section instead."""
    try:
        return make(bench)
    except PeerUnavailable as e:
        if bench.opts.strict:
            raise RuntimeError(f"{name}: {e} (--strict)") from e
        report.note(f"peers: {name} left out: {e}")
        print(f"  peers: {name} left out: {e}", flush=True)
        return None


def drain_contenders(bench: Bench, report: Report) -> list[Contender]:
    out: list[Contender] = []
    for name in bench.opts.peers:
        out += _available(bench, report, name, _module(name).drain_contenders) or []
    if {"graphile-worker", "dbos"} & set(bench.opts.peers):
        report.note(
            "drain, graphile-worker and DBOS Transact: each at its documented best settings and at its "
            "defaults (printed in the labels), 2 worker processes, trials interleaved with the others'. "
            "The backlog is added in one transaction (graphile-worker's add_jobs; DBOS's client "
            "enqueue_in_transaction) with the workers paused; runs/s = jobs / (first handler start .. "
            "last handler end), which each worker process keeps in memory and writes at SIGTERM: "
            "graphile-worker keeps no history to read it from. A contender too slow for the full "
            "backlog drains 30,000 (graphile-worker at its defaults) or 5,000 (DBOS: with no "
            "worker_concurrency one process takes the whole backlog at once, a thread per workflow on "
            "a pool of 20 connections, and 30,000 time out)"
        )
    return out


def lag(bench: Bench, report: Report) -> None:
    """Each selected peer's recurring schedule, and for graphile-worker and DBOS the herd."""
    from loadtest.bench.lag import add_lags, firing_interval

    for name in ("procrastinate", "pgqueuer"):
        if name not in bench.opts.peers:
            continue
        lags = _module(name).lag(bench, bench.opts.lag_s)
        add_lags(
            report, f"lag.{name}.every_second", f"{name}, cron every second, slot to handler start", lags
        )
        report.add(
            f"lag.{name}.every_second.interval",
            f"{name}, every-second cron: mean interval between firings",
            firing_interval([start for _, start, _ in stamps.read(bench.log_dir / f"lag-{name}.stamps")]),
            "s",
        )
    herds: list[Herd] = []
    for name, every in (("graphile-worker", "minute"), ("dbos", "second")):
        if name not in bench.opts.peers:
            continue
        module = _module(name)
        got = _available(bench, report, name, module.lags)
        if got is None:
            continue
        for setting, lags in got.items():
            label = f"{module.lag_label(setting)}, a schedule every {every}, slot to handler start"
            add_lags(report, f"lag.{_key(name)}.{setting}.every_{every}", label, lags)
        herds += module.herds(bench)
    trials: dict[str, list[float]] = {h.key: [] for h in herds}
    for rep in range(bench.opts.repeat):  # interleaved, so drift hits all alike
        for h in herds:
            t = herd_trial(bench, h)
            trials[h.key].append(t)
            print(f"  herd {h.key} #{rep + 1}: {t:.3f} s", flush=True)
    for h in herds:
        report.add(
            f"lag.{h.key}.herd",
            f"{HERD:,} jobs due at the same instant, slot to the last start: {h.label}",
            median(trials[h.key]),
            "s",
            trials=trials[h.key],
        )
    if herds:
        report.note(
            "lag, graphile-worker and DBOS Transact: one worker process per setting, both settings side "
            "by side in databases of their own; graphile-worker's crontab fires at most once a minute "
            "(its slot: the _cron.ts it hands the job), DBOS's schedule every second (its slot: the "
            "scheduled time it hands the workflow). Herd: with 2 worker processes ready, "
            f"{HERD:,} jobs are added ahead of one instant (graphile-worker: run_at, one statement, "
            "3 s ahead; DBOS: each enqueue's delay_seconds, 15 s ahead), and the figure is that instant "
            "to the last handler's start (fleet: lag.fleet.burst.last_start)"
        )


def _key(name: str) -> str:
    """The peer's name in figure keys (no dashes)."""
    return name.replace("-", "_")
