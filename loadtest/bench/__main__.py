"""`python -m loadtest.bench`: measure fleet beside PostgreSQL's limit and beside the peers, in one run
on one server, print one table and optionally write it as JSON.

Sections (--only): limit (pgbench), drain (a backlog of no-op runs, peak RSS, round trips),
lag (slot to handler start), ticker (materialisation rate, CPU), million (apply of a million-schedule
file, one ticker over it), history (drain over 20 million finished rows), reclaim (SIGKILL to retake), async (one worker running 1,000 async handlers that each
sleep 1 s: first claim to last finish), metrics (a scrape and its computation at 20,000 schedules),
peers (procrastinate and pgqueuer in drain and lag).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from fleet.embedded import embedded_url
from loadtest.bench.config import SECTIONS, SLOW_SECTIONS, Bench, Options, options
from loadtest.bench.procs import ROOT
from loadtest.bench.report import Report
from loadtest.bench.server import Server
from loadtest.bench.targets import add_ratios

# Order of the table; drain and lag also run the peers when "peers" is selected.
MODULES = {
    "limit": "loadtest.bench.limit",
    "drain": "loadtest.bench.drain",
    "lag": "loadtest.bench.lag",
    "ticker": "loadtest.bench.ticker_cost",
    "million": "loadtest.bench.million",
    "history": "loadtest.bench.history",
    "reclaim": "loadtest.bench.reclaim",
    "async": "loadtest.bench.async_handlers",
    "metrics": "loadtest.bench.metrics_scrape",
}


def parse(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="small sizes, one repetition; skips million, history and peers"
    )
    p.add_argument("--only", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    p.add_argument(
        "--database-url", help="server to use (default: FLEET_DATABASE_URL, else the embedded one)"
    )
    p.add_argument("--json", type=Path, help="write the figures to this file as JSON")
    p.add_argument("--repeat", type=int, help="trials per drain figure; the median is reported (3, quick 1)")
    p.add_argument(
        "--backlog", type=int, help="due no-op runs per drain trial and per pgbench run (200000, quick 10000)"
    )
    p.add_argument("--workers", default="1,2,4", help="fleet-worker process counts for the drain (1,2,4)")
    p.add_argument("--log-dir", type=Path, help="where process logs go (default: a new temporary directory)")
    a = p.parse_args(argv)
    if a.only:
        sections = tuple(s.strip() for s in a.only.split(",") if s.strip())
        if unknown := set(sections) - set(SECTIONS):
            p.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    else:
        sections = tuple(s for s in SECTIONS if not (a.quick and s in SLOW_SECTIONS))
    if "peers" in sections and not peers_installed():
        print("peers: procrastinate or pgqueuer is not installed (pip install -e '.[bench]'): skipped")
        sections = tuple(s for s in sections if s != "peers")
    if a.repeat is not None and a.repeat < 1:
        p.error("--repeat: at least 1")
    workers = tuple(int(w) for w in a.workers.split(","))
    return options(sections, a.quick, a.repeat, a.backlog, workers), a


def peers_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("procrastinate", "pgqueuer", "asyncpg"))


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    opts, a = parse(argv)
    signal.signal(signal.SIGTERM, _raise_exit)  # clean up (processes, databases) on SIGTERM too
    url = a.database_url or os.environ.get("FLEET_DATABASE_URL") or embedded_url(ROOT)
    server = Server(url)
    bench = Bench(opts, server, a.log_dir)
    report = Report(
        {
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": server.version(),
            "sections": list(opts.sections),
            "quick": opts.quick,
            "repeat": opts.repeat,
            "backlog": opts.backlog,
            "log_dir": str(bench.log_dir),
        }
    )
    started = time.monotonic()
    print(f"fleet benchmark: sections {', '.join(opts.sections)}; logs in {bench.log_dir}", flush=True)
    try:
        for section, module in MODULES.items():
            runs_peers = section in ("drain", "lag") and bench.selected("peers")
            if not (bench.selected(section) or runs_peers):
                continue
            t0 = time.monotonic()
            print(f"[{time.monotonic() - started:6.0f}s] {section} ...", flush=True)
            importlib.import_module(module).run(bench, report)
            print(
                f"[{time.monotonic() - started:6.0f}s] {section} done in {time.monotonic() - t0:.0f}s",
                flush=True,
            )
        add_ratios(report)
    finally:
        bench.close()
    report.meta["seconds"] = round(time.monotonic() - started, 1)
    print()
    print(report.table())
    if a.json:
        a.json.write_bytes(report.json())
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
