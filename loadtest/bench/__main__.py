"""`python -m loadtest.bench`: measure fleet beside PostgreSQL's limit and beside the peers, in one run
on one server, print one table and optionally write it as JSON.

Sections (--only), one line each:
    limit      pgbench on fleet's own table: PostgreSQL's limit
    drain      a backlog of no-op runs, peak RSS, round trips
    lag        slot to handler start
    herd       100,000 schedules due in the same second
    sustained  100,000 schedules every minute for 10 minutes: lag, missed slots, ticker CPU
    claimers   4, 16 and 64 worker processes draining one backlog, and their connections
    ticker     materialisation rate, CPU
    million    apply of a million-schedule file, one ticker over it
    history    the drain over 20 million finished rows
    reclaim    SIGKILL to retake
    async      one worker running 1,000 async handlers that each sleep 1 s
    metrics    a scrape and its computation at 20,000 schedules
    health     status --json and the metrics at 100,000 schedules over 20 million runs
    verify     the slot ledger of a year of a one-minute schedule (interval and cron)
    retention  claim latency while a retention pass deletes old finished runs, and its rate
    dashboard  each page at 10,000 schedules and 5 million runs, the load of a live overview
    peers      pgqueuer, procrastinate, graphile-worker and DBOS Transact in drain and lag (--peers)
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
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from fleet.store.embedded import embedded_url
from loadtest.bench.config import PEERS, SECTIONS, SLOW_SECTIONS, Bench, Options, options
from loadtest.bench.procs import ROOT
from loadtest.bench.report import Report
from loadtest.bench.server import Server
from loadtest.bench.targets import add_ratios

# Order of the table; drain and lag also run the peers when "peers" is selected.
MODULES = {
    "limit": "loadtest.bench.limit",
    "drain": "loadtest.bench.drain",
    "lag": "loadtest.bench.lag",
    "herd": "loadtest.bench.herd",
    "sustained": "loadtest.bench.sustained",
    "claimers": "loadtest.bench.claimers",
    "ticker": "loadtest.bench.ticker_cost",
    "million": "loadtest.bench.million",
    "history": "loadtest.bench.history",
    "reclaim": "loadtest.bench.reclaim",
    "async": "loadtest.bench.async_handlers",
    "jobsets": "loadtest.bench.jobsets",
    "cost": "loadtest.bench.cost",
    "metrics": "loadtest.bench.metrics_scrape",
    "dashboard": "loadtest.bench.dashboard_cost",
    "retention": "loadtest.bench.retention",
    "health": "loadtest.bench.health_status",
    "verify": "loadtest.bench.ledger",
}


def parse(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, one repetition; skips million, history, peers and sustained",
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
    p.add_argument("--herd", type=str, help="schedules due in the same second (100000, quick 5000)")
    p.add_argument("--sustained", type=str, help="schedules every minute (100000, quick 5000)")
    p.add_argument(
        "--sustained-minutes", type=str, help="whole minutes the sustained load is measured (10, quick 2)"
    )
    p.add_argument(
        "--million", type=str, help="hourly schedules of the million section (1000000, quick 20000)"
    )
    p.add_argument(
        "--million-s", type=str, help="seconds the million section's ticker is measured (600, quick 60)"
    )
    p.add_argument(
        "--claimers", default="4,16,64", help="worker process counts draining one backlog (4,16,64)"
    )
    p.add_argument("--log-dir", type=Path, help="where process logs go (default: a new temporary directory)")
    p.add_argument(
        "--peers",
        default=",".join(PEERS),
        help=f"the peers the peers section measures ({','.join(PEERS)}); graphile-worker is installed "
        "with npm and DBOS in a virtual environment, in $FLEET_BENCH_PEERS_DIR (default "
        "~/.cache/fleet-bench/peers)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="a peer that cannot be installed here (no Node.js, a missing package) fails the run "
        "instead of being left out with a note",
    )
    a = p.parse_args(argv)
    if a.only:
        sections = tuple(s.strip() for s in a.only.split(",") if s.strip())
        if unknown := set(sections) - set(SECTIONS):
            p.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    else:
        sections = tuple(s for s in SECTIONS if not (a.quick and s in SLOW_SECTIONS))
    peers = tuple(s.strip() for s in a.peers.split(",") if s.strip())
    if unknown := set(peers) - set(PEERS):
        p.error(f"--peers: unknown peer(s): {', '.join(sorted(unknown))}")
    if not peers:
        p.error("--peers: must name at least one peer")
    if "peers" in sections and (missing := missing_packages(peers)):
        text = f"peers: {', '.join(missing)} not installed (pip install -e '.[bench]')"
        if a.strict:
            p.error(f"{text}; --strict")
        print(f"{text}: left out")
        peers = tuple(x for x in peers if x not in missing)
        if not peers:
            sections = tuple(s for s in sections if s != "peers")
    if a.repeat is not None and a.repeat < 1:
        p.error("--repeat: at least 1")
    workers = counts(p, "--workers", a.workers)
    sizes = {
        flag: count(p, flag, text)
        for flag, text in (
            ("--herd", a.herd),
            ("--sustained", a.sustained),
            ("--sustained-minutes", a.sustained_minutes),
            ("--million", a.million),
            ("--million-s", a.million_s),
        )
        if text is not None
    }
    opts = options(
        sections,
        a.quick,
        a.repeat,
        a.backlog,
        workers,
        herd=sizes.get("--herd"),
        sustained=sizes.get("--sustained"),
        sustained_minutes=sizes.get("--sustained-minutes"),
        claimers=counts(p, "--claimers", a.claimers),
        million=sizes.get("--million"),
        million_s=sizes.get("--million-s"),
        peers=peers,
        strict=a.strict,
    )
    return opts, a


def count(p: argparse.ArgumentParser, flag: str, text: str) -> int:
    """A positive whole number given to `flag`; exits with a one-line error (code 2) otherwise."""
    try:
        n = int(text)
    except ValueError:
        p.error(f"{flag}: must be a whole number, got {text!r}")
    if n < 1:
        p.error(f"{flag}: must be at least 1, got {n}")
    return n


def counts(p: argparse.ArgumentParser, flag: str, text: str) -> tuple[int, ...]:
    """Comma-separated positive whole numbers given to `flag`, at least one."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        p.error(f"{flag}: must list at least one number")
    return tuple(count(p, flag, t) for t in items)


def missing_packages(peers: tuple[str, ...]) -> list[str]:
    """The peers among `peers` whose Python packages (the bench extra) are not installed here."""
    import importlib.util

    needs = {"pgqueuer": ("pgqueuer", "asyncpg"), "procrastinate": ("procrastinate",)}
    return [p for p in peers if any(importlib.util.find_spec(m) is None for m in needs.get(p, ()))]


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
    failed: list[str] = []
    print(f"fleet benchmark: sections {', '.join(opts.sections)}; logs in {bench.log_dir}", flush=True)
    try:
        for section, module in MODULES.items():
            runs_peers = section in ("drain", "lag") and bench.selected("peers")
            if not (bench.selected(section) or runs_peers):
                continue
            t0 = time.monotonic()
            print(f"[{time.monotonic() - started:6.0f}s] {section} ...", flush=True)
            try:
                importlib.import_module(module).run(bench, report)
            except Exception as e:  # noqa: BLE001 - one broken section must not cost the others' figures
                failed.append(section)
                report.note(f"{section}: failed, its figures are missing: {type(e).__name__}: {e}")
                print(f"[{time.monotonic() - started:6.0f}s] {section} FAILED: {e!r}", flush=True)
                traceback.print_exc()
                bench.procs.stop_all()  # what the section started, before the next one measures
            # Its databases go with it: a later section must not share the server with their
            # data, nor with autovacuum working through millions of rows left behind.
            bench.server.drop_all()
            print(
                f"[{time.monotonic() - started:6.0f}s] {section} done in {time.monotonic() - t0:.0f}s",
                flush=True,
            )
            if a.json:  # what is measured so far, in case the run is cut short
                report.meta["seconds"] = round(time.monotonic() - started, 1)
                a.json.write_bytes(report.json())
        add_ratios(report)
    finally:
        bench.close()
    report.meta["seconds"] = round(time.monotonic() - started, 1)
    print()
    print(report.table())
    if a.json:
        a.json.write_bytes(report.json())
        print(f"\nwrote {a.json}")
    if failed:
        print(f"sections that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
