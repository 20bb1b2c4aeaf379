"""What the peers run outside this Python (graphile-worker's Node process, DBOS's own virtual
environment) share with the benchmark: files they write when ready and at SIGTERM (the handlers'
window of a drain), the herd of jobs due at one instant, and the database URL in the URI form
their drivers read."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict

from loadtest.bench import stamps
from loadtest.bench.config import Bench
from loadtest.bench.procs import Proc
from loadtest.bench.server import wait_until

HERD = 1_000  # jobs due at the same instant
HERD_LEAD_S = 3.0  # from the insert to their instant, where the insert is one statement
HERD_WAIT_S = 60.0  # longest wait for the last of them to start


def uri(url: str) -> str:
    """`url` (a libpq URI or key=value string) as postgresql://user:password@host:port/dbname."""
    d = {k: str(v) for k, v in conninfo_to_dict(url).items() if v not in (None, "")}
    auth = quote(d.get("user", ""), safe="")
    if "password" in d:
        auth += ":" + quote(d["password"], safe="")
    host = d.get("host", "")
    query = ""
    if host.startswith("/"):  # a socket folder goes in the query
        query, host = f"?host={quote(host, safe='')}", ""
    port = f":{d['port']}" if "port" in d else ""
    return (
        f"postgresql://{auth}{'@' if auth else ''}{host}{port}/{quote(d.get('dbname', ''), safe='')}{query}"
    )


class ProcessFiles:
    """Per-process files of one start of `n` processes under `name`: ready, window, stamps."""

    def __init__(self, bench: Bench, name: str, n: int) -> None:
        self.ready = [bench.log_dir / f"{name}-{i}.ready" for i in range(n)]
        self.window = [bench.log_dir / f"{name}-{i}.window" for i in range(n)]
        self.stamps = bench.log_dir / f"{name}.stamps"
        for p in (*self.ready, *self.window, self.stamps):
            p.unlink(missing_ok=True)

    def env(self, i: int) -> dict[str, str]:
        return {
            "BENCH_READY": str(self.ready[i]),
            "BENCH_WINDOW": str(self.window[i]),
            "BENCH_STAMPS": str(self.stamps),
        }

    def all_ready(self) -> bool:
        return all(p.exists() for p in self.ready)

    def measure(self) -> tuple[int, float]:
        """Jobs run by all the processes, and the seconds from the first handler's start to the
        last one's end (what each process wrote at SIGTERM)."""
        rows = []
        for p in self.window:
            if not p.exists():
                raise RuntimeError(f"{p.name}: the worker wrote no window at SIGTERM")
            n, first, last = p.read_text().split()
            if int(n):
                rows.append((int(n), float(first), float(last)))
        if not rows:
            return 0, 0.0
        return sum(n for n, _, _ in rows), max(last for _, _, last in rows) - min(f for _, f, _ in rows)


@dataclass(frozen=True)
class Herd:
    """A peer's contender in the herd: `start` starts its worker processes (with `files`' env),
    `add` makes HERD jobs due at the Unix instant it is given, whose handlers stamp it."""

    key: str
    label: str
    start: Callable[[ProcessFiles], list[Proc]]
    add: Callable[[float], None]
    processes: int = 2
    lead_s: float = HERD_LEAD_S  # how far ahead of their instant the jobs are added


def herd_trial(bench: Bench, herd: Herd) -> float:
    """Seconds from the jobs' instant to the last one's handler start."""
    files = ProcessFiles(bench, f"herd-{herd.key}", herd.processes)
    procs = herd.start(files)
    try:
        wait_until(files.all_ready, 60, f"{herd.key}'s workers to be ready", 0.2, bench.procs, procs)
        time.sleep(0.5)
        slot = round(time.time() + herd.lead_s, 3)
        herd.add(slot)
        if time.time() > slot:
            raise RuntimeError(f"{herd.key}: adding the herd took past its instant ({herd.lead_s:g} s ahead)")

        def done() -> bool:
            return len(this_slot(stamps.read(files.stamps), slot)) >= HERD

        wait_until(
            done, HERD_LEAD_S + HERD_WAIT_S, f"{HERD:,} {herd.key} jobs to start", 0.2, bench.procs, procs
        )
    finally:
        bench.procs.stop(procs)
    every = stamps.read(files.stamps)
    rows = this_slot(every, slot)
    if len(rows) != HERD:
        raise RuntimeError(f"{herd.key}: {len(rows)} herd stamps, expected {HERD} for slot {slot}")
    if len(every) > len(rows):
        # a peer that resumes the work an earlier trial's stop interrupted (DBOS recovers its
        # workflows at start) runs those jobs again: their stamps carry their own slot
        print(f"  herd {herd.key}: {len(every) - len(rows)} job(s) of an earlier trial run again", flush=True)
    return max(start for _, start, _ in rows) - slot


def this_slot(rows: Sequence[tuple[float, float, str]], slot: float) -> list[tuple[float, float, str]]:
    """The stamps of the jobs due at `slot` (to the millisecond it was given as)."""
    return [r for r in rows if abs(r[0] - slot) <= 1e-3]


def wait_stamps(
    bench: Bench, procs: Sequence[Proc], paths: Sequence[Path], count: int, limit_s: float
) -> None:
    """Keep `procs` running until every file of `paths` has `count` stamps, at most `limit_s`."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and any(len(stamps.read(p)) < count for p in paths):
        bench.procs.check(procs)
        time.sleep(0.5)
