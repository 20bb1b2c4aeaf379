"""The live view of `fleetctl up`: each schedule's verdict, last and next slot, runs, and the processes."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from fleet.health import reading
from fleet.health.results import ScheduleHealth
from fleet.observe.printable import printable
from fleet.ops.control import ProcInfo
from fleet.ops.status import fleet_lines, live_processes, verdict_text
from fleet.process.supervisor import ALERT_PROGRAM, TICKER_PROGRAM
from fleet.store.queries import q

COLUMNS = (
    "SCHEDULE",
    "VERDICT",
    "LAST SLOT",
    "NEXT",
    "PENDING",
    "RUNNING",
    "DONE/1h",
    "RETRIED/1h",
    "DEAD",
    "SKIPPED/1h",
)


# A next slot this little past due is being created by the ticker right now, not late.
DUE_NOW_S = 5.0
# A ticker started this recently by `fleetctl up`, up but not yet in the database, is starting.
TICKER_STARTING_S = 20.0
UP_STATES = ("RUNNING", "STARTING")


@dataclass
class Snapshot:
    """What one frame shows; `db_error` or `sv_error` when a source could not be read."""

    schedules: list[dict[str, Any]] = field(default_factory=list)
    fleet: list[str] = field(default_factory=list)  # `fleetctl status`'s `fleet:` lines (no live ticker)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> counts, from the database
    processes: list[ProcInfo] = field(default_factory=list)  # from supervisord
    runs_here: int | None = None  # runs held by this host's workers, by the database
    up_for_s: float | None = None  # how long ago `fleetctl up` started its processes
    db_error: str | None = None
    sv_error: str | None = None


def read_database(conn: psycopg.Connection[Any], snap: Snapshot) -> None:
    """Each schedule's `fleetctl status` verdict and open and dead runs, what it did in the last
    hour, the processes seen, and the runs that the workers of `snap.processes` hold."""
    fleet, found = reading.health_report(conn)
    snap.fleet = fleet_lines(fleet, found)
    recent = {r["schedule_name"]: r for r in conn.execute(q("run_recent_counts"), {"now": None})}
    now = conn.execute(q("clock_now")).fetchone()
    assert now is not None
    snap.schedules = [_overview(h, recent.get(h.name), now["now"]) for h in found]
    snap.seen = {r["kind"]: r for r in conn.execute(q("process_overview"))}
    pids = {p.pid for p in snap.processes if p.slot is not None and p.pid}
    host = socket.gethostname()
    mine = [
        p for p in live_processes(conn) if p["kind"] == "worker" and p["host"] == host and p["pid"] in pids
    ]
    snap.runs_here = sum(p["running"] for p in mine)


def _overview(h: ScheduleHealth, recent: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    """One schedule's line of the view, from its health and its last hour."""
    return {
        "name": h.name,
        "verdict": verdict_text(h),
        "state": "paused" if h.paused else None if h.enabled else "disabled",
        "next_in_s": None if h.next_run_at is None else (h.next_run_at - now).total_seconds(),
        "last_status": h.last_outcome,
        "last_ago_s": None if h.last_run_at is None else (now - h.last_run_at).total_seconds(),
        "pending": h.pending_runs,
        "running": h.running_runs,
        "dead": h.dead_runs,
        "done": recent["done"] if recent else 0,
        "skipped": recent["skipped"] if recent else 0,
        "retried": recent["retried"] if recent else 0,
    }


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{_span(seconds)} ago" if seconds >= 0 else f"in {_span(-seconds)}"


def _in(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"in {_span(seconds)}"
    return "due now" if seconds > -DUE_NOW_S else f"{_span(-seconds)} late"


def _span(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def schedule_cells(row: dict[str, Any]) -> list[str]:
    last = f"{_ago(row['last_ago_s'])} {row['last_status']}" if row["last_status"] else "-"
    counts = (row[k] for k in ("pending", "running", "done", "retried", "dead", "skipped"))
    # a paused or disabled schedule plans no slot: the one it had is not coming
    nxt = row.get("state") or _in(row["next_in_s"])
    return [printable(row["name"]), row["verdict"], last, nxt, *map(str, counts)]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(r: Sequence[str]) -> str:
        cells = (c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        return "  ".join(cells).rstrip()

    return [line(r) for r in rows]


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def host_line(processes: Sequence[ProcInfo]) -> str:
    """supervisord's view of this host: the ticker, workers and alert processes up (started or
    starting: a process registers in the database while supervisord still calls it starting), and
    how many workers `fleetctl scale` may run (supervisord's worker slots)."""
    workers = [p for p in processes if p.slot is not None]
    up = [p for p in processes if p.state in UP_STATES]
    alerts = sum(p.group == ALERT_PROGRAM for p in up)
    tickers = sum(p.slot is None for p in up) - alerts
    starting = sum(p.state == "STARTING" for p in up)
    line = f"this host: {_count(tickers, 'ticker')}, {_count(len(up) - tickers - alerts, 'worker')}"
    line += f", {_count(alerts, 'alert process', 'alert processes')}" if alerts else ""
    line += f" ({starting} starting)" if starting else ""
    return f"{line}; `fleetctl scale N` runs up to {len(workers)}"


def process_summary(snap: Snapshot) -> list[str]:
    """Lines about processes: supervisord's view of this host, the database's view of every host."""
    lines = []
    if snap.sv_error:
        lines.append(f"supervisord: {printable(snap.sv_error)}")
    else:
        lines.append(host_line(snap.processes))
        lines += [
            f"  {p.name} {p.state} {printable(p.description)}".rstrip()
            for p in snap.processes
            if p.state not in (*UP_STATES, "STOPPED")
        ]
    seen = ", ".join(
        f"{_count(r['n'], kind)} on {_count(r['hosts'], 'host')}" for kind, r in sorted(snap.seen.items())
    )
    if not snap.db_error:
        # a process registers a moment after it starts: say so rather than contradict the line above
        starting = not snap.sv_error and any(p.state == "STARTING" for p in snap.processes)
        lines.append(f"in the database: {seen or ('no live process yet' if starting else 'no live process')}")
    return lines


def stopping_line(processes: Sequence[ProcInfo], runs_here: int | None, wait_s: int) -> str:
    """What `fleetctl up` says on Ctrl-C: the worker processes that stop, apart from the runs they
    hold (when the database said), and how long that may take."""
    workers = sum(p.slot is not None and p.state in UP_STATES for p in processes)
    if runs_here is None:
        runs = f"their runs finish or are handed back, up to {wait_s}s"
    elif runs_here == 0:
        runs = "no run in progress"
    else:
        runs = f"{_count(runs_here, 'run')} in progress: finished or handed back, up to {wait_s}s"
    return (
        f"stopping {_count(workers, 'worker process', 'worker processes')} ({runs}), then the ticker; "
        "Ctrl-C again to kill at once"
    )


def fleet_view(snap: Snapshot) -> list[str]:
    """The `fleet:` lines, where NO-TICKER says so while this host's ticker is still starting (up
    under supervisord, not registered yet, in the first seconds of `fleetctl up`)."""
    ticker_up = any(p.group == TICKER_PROGRAM and p.state in UP_STATES for p in snap.processes)
    starting = (
        ticker_up
        and "ticker" not in snap.seen
        and snap.up_for_s is not None
        and snap.up_for_s < TICKER_STARTING_S
    )
    if not starting:
        return snap.fleet
    return [
        "fleet: NO-TICKER until this host's ticker, starting now, registers"
        if line.startswith("fleet: NO-TICKER:")
        else line
        for line in snap.fleet
    ]


def frame(snap: Snapshot, header: str) -> list[str]:
    """The full view, as lines."""
    out = [header, ""]
    if snap.db_error:
        out.append(f"database: {printable(snap.db_error)}")
    elif not snap.schedules:
        out.append("no schedules yet: add some with `fleetctl apply FILE.toml`")
    else:
        out += [*fleet_view(snap), *_table([COLUMNS, *(schedule_cells(r) for r in snap.schedules)])]
    out.append("")
    out += process_summary(snap)
    return [printable(line) for line in out]


def plain_lines(snap: Snapshot) -> list[str]:
    """The view as log lines (stdout is not a terminal): one per schedule, one for processes."""
    stamp = time.strftime("%H:%M:%S")
    if snap.db_error:
        lines = [f"{stamp} database: {printable(snap.db_error)}"]
    else:
        lines = [f"{stamp} {line}" for line in fleet_view(snap)] + [
            f"{stamp} schedule={c[0]} verdict={c[1]} last={c[2].replace(' ', '_')} "
            f"next={c[3].replace(' ', '_')} "
            f"pending={c[4]} running={c[5]} done_1h={c[6]} retried_1h={c[7]} dead={c[8]} skipped_1h={c[9]}"
            for c in (schedule_cells(r) for r in snap.schedules)
        ]
    lines += [f"{stamp} {line.strip()}" for line in process_summary(snap)]
    return [printable(line) for line in lines]


class Screen:
    """Redraws a frame in place on a terminal."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.out.write("\x1b[?25l\x1b[2J")  # hide the cursor, clear once

    def draw(self, lines: list[str]) -> None:
        body = "".join(f"{line}\x1b[K\n" for line in lines)
        self.out.write(f"\x1b[H{body}\x1b[J")
        self.out.flush()

    def close(self) -> None:
        self.out.write("\x1b[?25h")
        self.out.flush()


def log_tail(path: Path, max_bytes: int = 2000) -> str:
    """The last non-empty line of a log file ('' when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            lines = [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
