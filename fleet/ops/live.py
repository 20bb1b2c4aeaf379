"""The live view of `fleetctl up`: each schedule's verdict, last and next slot, runs, and the processes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from fleet.ops.control import ProcInfo
from fleet.ops.inspect import schedule_health
from fleet.queries import q

COLUMNS = ("SCHEDULE", "VERDICT", "LAST SLOT", "NEXT", "PENDING", "RUNNING", "DONE/1h", "RETRIED/1h",
           "DEAD", "SKIPPED/1h")


@dataclass
class Snapshot:
    """What one frame shows; `db_error` or `sv_error` when a source could not be read."""

    schedules: list[dict[str, Any]] = field(default_factory=list)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> counts, from the database
    processes: list[ProcInfo] = field(default_factory=list)  # from supervisord
    db_error: str | None = None
    sv_error: str | None = None


def read_database(conn: psycopg.Connection[Any], snap: Snapshot) -> None:
    """Each schedule's runs by status with its `fleetctl status` verdict, and the processes seen."""
    verdicts = {h.name: h.verdict for h in schedule_health(conn)}
    snap.schedules = conn.execute(q("schedule_overview")).fetchall()
    for row in snap.schedules:
        row["verdict"] = verdicts.get(row["name"], "-")
    snap.seen = {r["kind"]: r for r in conn.execute(q("process_overview"))}


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{_span(seconds)} ago" if seconds >= 0 else f"in {_span(-seconds)}"


def _in(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"in {_span(seconds)}" if seconds >= 0 else f"{_span(-seconds)} late"


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
    return [row["name"], row["verdict"], last, _in(row["next_in_s"]), *map(str, counts)]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    def line(r: Sequence[str]) -> str:
        cells = (c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        return "  ".join(cells).rstrip()

    return [line(r) for r in rows]


def process_summary(snap: Snapshot) -> list[str]:
    """Lines about processes: supervisord's view of this host, the database's view of every host."""
    lines = []
    if snap.sv_error:
        lines.append(f"supervisord: {snap.sv_error}")
    else:
        tickers = [p for p in snap.processes if p.slot is None]
        workers = [p for p in snap.processes if p.slot is not None]
        running = [p for p in workers if p.state == "RUNNING"]
        other = [p for p in tickers + workers if p.state not in ("RUNNING", "STOPPED")]
        lines.append(
            f"this host: {sum(p.state == 'RUNNING' for p in tickers)}/{len(tickers)} ticker running, "
            f"{len(running)} worker{'' if len(running) == 1 else 's'} running "
            f"({len(workers)} slots; `fleetctl scale N` changes it)"
        )
        lines += [f"  {p.name} {p.state} {p.description}".rstrip() for p in other]
    seen = ", ".join(
        f"{r['n']} {kind}{'' if r['n'] == 1 else 's'} on {r['hosts']} host{'' if r['hosts'] == 1 else 's'}"
        for kind, r in sorted(snap.seen.items())
    )
    if not snap.db_error:
        lines.append(f"in the database: {seen or 'no live process'}")
    return lines


def frame(snap: Snapshot, header: str) -> list[str]:
    """The full view, as lines."""
    out = [header, ""]
    if snap.db_error:
        out.append(f"database: {snap.db_error}")
    elif not snap.schedules:
        out.append("no schedules yet: add some with `fleetctl apply FILE.toml`")
    else:
        out += _table([COLUMNS, *(schedule_cells(r) for r in snap.schedules)])
    out.append("")
    out += process_summary(snap)
    return out


def plain_lines(snap: Snapshot) -> list[str]:
    """The view as log lines (stdout is not a terminal): one per schedule, one for processes."""
    stamp = time.strftime("%H:%M:%S")
    if snap.db_error:
        lines = [f"{stamp} database: {snap.db_error}"]
    else:
        lines = [
            f"{stamp} schedule={c[0]} verdict={c[1]} last={c[2].replace(' ', '_')} "
            f"next={c[3].replace(' ', '_')} "
            f"pending={c[4]} running={c[5]} done_1h={c[6]} retried_1h={c[7]} dead={c[8]} skipped_1h={c[9]}"
            for c in (schedule_cells(r) for r in snap.schedules)
        ]
    lines += [f"{stamp} {line.strip()}" for line in process_summary(snap)]
    return lines


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
