"""One load test, start to verdict: database, schema, fleet under supervisord, load, faults, drain,
audit, report. Everything it starts it stops, by pid, also when it fails or is interrupted, and the
work directory it made (the embedded database's files, tens of MB, the configuration and logs) it
removes."""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from fleet.store.db import connect
from fleet.store.embedded import stop_embedded
from fleet.store.queries import q as fleet_q
from loadtest import report
from loadtest.audit import AuditResult, audit
from loadtest.database import Server, create_database, database_name, db_clock, prepare, retrying, shown
from loadtest.faults import Injector
from loadtest.fleetrun import FleetRun
from loadtest.jobs import JOB
from loadtest.load import apply_load
from loadtest.profile import LoadConfig
from loadtest.queries import q

PROGRESS_EVERY_S = 10.0
RSS_EVERY_S = 2.0


@dataclass(frozen=True)
class RunOptions:
    workdir: Path | None = None
    database_url: str | None = None  # a server to use instead of the embedded one
    in_place: bool = False  # use database_url's database itself instead of a fresh one on its server
    pg_restart_cmd: str | None = None
    keep_database: bool = False  # leave the embedded server running (to audit again)
    json_path: Path | None = None
    png_path: Path | None = None
    reclaim_slack_s: float = 0.0


def say(text: str) -> None:
    print(f"loadtest: {text}", flush=True)


class Interrupted(Exception):
    """SIGINT or SIGTERM: stop, clean up, no verdict."""


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run(cfg: LoadConfig, opts: RunOptions) -> int:
    """Run the load test; 0 when every invariant holds, 1 when one does not, 2 when it could not run."""
    # A directory of our own (no --workdir) goes at the end, whatever the end; one given is kept.
    made = opts.workdir is None
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="fleet-lt-", dir="/tmp"))
    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    server: Server | None = None
    fleet: FleetRun | None = None
    injector: Injector | None = None
    result: AuditResult | None = None
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o755)  # the embedded PostgreSQL runs as its own user when we are root
        kept = "kept" if not made else "removed at the end; --workdir DIR keeps one"
        say(f"work directory {workdir} (configuration, logs; {kept})")
        server, url = _database(workdir, opts)
        if cfg.pg_restarts and not server.can_restart:
            say("the database is not the embedded one and no --pg-restart-cmd is given: no restart")
            cfg = replace(cfg, pg_restarts=0)
        prepare(url)
        settings: dict[str, Any] = {
            **cfg.as_dict(),
            "reclaim_slack_s": opts.reclaim_slack_s,
            "database": shown(url),
            "database_name": database_name(url),
            "embedded": server.embedded,
        }
        fleet = FleetRun(workdir, url, cfg)
        say(
            f"starting supervisord: {cfg.tickers} tickers, {cfg.workers} workers x {cfg.concurrency} "
            f"(lease {cfg.lease_s:g} s, heartbeat {cfg.heartbeat_s:g} s, poll {cfg.poll_s:g} s)"
        )
        fleet.start()
        with connect(url, "loadtest") as conn:
            fleet.wait_ready(conn)
            start, text = apply_load(conn, cfg, settings)
            (workdir / "schedules.toml").write_text(text, encoding="utf-8")
            say(
                f"{cfg.schedules} schedules, {cfg.slots_per_s():.1f} slots/s, first slot at "
                f"{start.isoformat()}; {cfg.duration_s:g} s of load with faults"
            )
            while db_clock(conn) < start:
                time.sleep(0.05)
        t0 = time.monotonic()
        injector = Injector(fleet, server, url, cfg, t0, say)
        injector.start()
        _load_phase(url, fleet, injector, t0, cfg.duration_s)
        retrying(url, lambda c: c.execute(q("meta_window_end")))
        injector.stop()
        for p in injector.problems:
            say(f"fault not delivered: {p}")
        say("window closed; faults stopped; draining (every slot up to the window's end created, then run)")
        note = _drain(url, cfg.drain_timeout_s)
        say(f"drained{f' with a problem: {note}' if note else ''}; stopping the fleet")
        fleet.sample_rss()
        fleet.stop()
        with connect(url, "loadtest") as conn:
            for peak in fleet.peaks.values():
                conn.execute(
                    q("process_peak"), {"name": peak.name, "pid": peak.pid, "kind": peak.kind, "kb": peak.kb}
                )
            result = audit(conn)
    except Interrupted as e:
        say(f"interrupted ({e}); stopping everything")
        return 2
    finally:
        # Another Ctrl-C while cleaning up would leave half of it undone: the cleanup is bounded.
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        keep_server = opts.keep_database and result is not None
        if injector is not None:
            injector.stop()
        if fleet is not None:
            fleet.stop()
        if server is not None and server.embedded and not keep_server:
            server.stop()
        if made and not keep_server:
            stop_embedded(workdir)  # one interrupted while it started, before `server` was set
            _remove(workdir)
        for s, h in old.items():
            signal.signal(s, h)
    assert result is not None and server is not None
    _publish(result, opts)
    if server is not None and server.embedded and opts.keep_database:
        say(
            f"the embedded PostgreSQL keeps running in {workdir}/.fleet/pgdata; audit again with\n"
            f"  python -m loadtest audit --database-url '{url}'"
        )
    elif not server.embedded:
        say(f"audit again with: python -m loadtest audit --database-url '{shown(url)}'")
    return 0 if result.ok else 1


def _database(workdir: Path, opts: RunOptions) -> tuple[Server, str]:
    if opts.database_url:
        server = Server(opts.database_url, restart_cmd=opts.pg_restart_cmd)
        if opts.in_place:
            return server, opts.database_url
        name = f"fleet_loadtest_{datetime.now(UTC):%Y%m%d_%H%M%S}"
        say(f"creating database {name} on {shown(opts.database_url)}")
        return server, create_database(opts.database_url, name)
    say("starting the embedded PostgreSQL")
    server = Server.start_embedded(workdir, opts.pg_restart_cmd)
    return server, create_database(server.url, "fleet_loadtest")


def _load_phase(url: str, fleet: FleetRun, injector: Injector, t0: float, duration_s: float) -> None:
    """Wait out the window, sampling memory and printing progress."""
    next_rss, next_progress = 0.0, PROGRESS_EVERY_S
    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= duration_s:
            return
        if fleet.proc is None or fleet.proc.poll() is not None:
            raise RuntimeError("supervisord exited during the load")
        if elapsed >= next_rss:
            fleet.sample_rss()
            next_rss = elapsed + RSS_EVERY_S
        if elapsed >= next_progress:
            say(f"t={elapsed:4.0f}s  {_progress(url)}  faults {sum(injector.delivered().values())}")
            next_progress += PROGRESS_EVERY_S
        time.sleep(min(0.2, duration_s - elapsed))


def _progress(url: str) -> str:
    try:
        with connect(url, "loadtest progress") as conn:
            counts = {
                r["status"]: r["n"]
                for r in conn.execute(
                    "SELECT status::text AS status, count(*) AS n FROM fleet.job_runs WHERE job = %s GROUP BY 1",
                    (JOB,),
                )
            }
    except Exception:  # noqa: BLE001 - a progress line, never a reason to stop
        return "(database unavailable)"
    return "  ".join(f"{s} {counts.get(s, 0):5d}" for s in ("done", "dead", "pending", "running"))


def _drain(url: str, timeout_s: float) -> str | None:
    """Wait until every slot up to the window's end exists, stop the schedules, wait until no run is open.

    Returns None, or what did not happen in time (the audit then reports the runs concerned)."""
    end = time.monotonic() + timeout_s
    note: str | None = None
    with connect(url, "loadtest drain") as conn:
        row = conn.execute(q("audit_meta")).fetchone()
        assert row is not None
        window_end = row["window_end"]
        while conn.execute(q("drain_behind"), {"job": JOB, "window_end": window_end}).fetchone()["n"]:  # type: ignore[index]
            if time.monotonic() > end:
                note = f"slots up to the window's end were not all created within {timeout_s:g} s"
                break
            time.sleep(0.2)
        with conn.transaction():
            names = [r["name"] for r in conn.execute(q("schedules_disable"), {"job": JOB})]
            # As `apply --prune` does: runs created ahead of their time and not due yet go with their
            # schedules, rather than keep the drain waiting for their time.
            conn.execute(fleet_q("slot_withdraw"), {"names": names, "rewind": True, "now": None})
        while note is None:
            n = conn.execute(q("drain_open"), {"job": JOB}).fetchone()["n"]  # type: ignore[index]
            if not n:
                break
            if time.monotonic() > end:
                note = f"{n} runs still pending or running after {timeout_s:g} s"
            time.sleep(0.2)
        conn.execute(q("meta_drained"), {"note": note})
    return note


def _publish(result: AuditResult | None, opts: RunOptions) -> None:
    if result is None:
        return
    print()
    report.print_report(result)
    if opts.json_path:
        report.write_json(result, opts.json_path)
        say(f"JSON report: {opts.json_path}")
    if opts.png_path:
        why_not = report.write_png(result, opts.png_path)
        say(why_not or f"timeline: {opts.png_path}")


def audit_only(url: str, json_path: Path | None, png_path: Path | None) -> int:
    """`python -m loadtest audit`: audit a finished load test's database; 0 when every invariant holds."""
    with connect(url, "loadtest audit") as conn:
        result = audit(conn)
    _publish(result, RunOptions(json_path=json_path, png_path=png_path))
    return 0 if result.ok else 1


def _remove(workdir: Path, within_s: float = 10.0) -> None:
    """Remove the work directory, again while a process that is just ending (the embedded database,
    a fleet process writing its last log line) still adds to it, for `within_s` at most."""
    end = time.monotonic() + within_s
    while True:
        shutil.rmtree(workdir, ignore_errors=True)
        if not workdir.exists() or time.monotonic() > end:
            return
        time.sleep(0.1)
