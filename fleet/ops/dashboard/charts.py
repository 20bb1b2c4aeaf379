"""A schedule's coverage strip (from the slot ledger: what became of each stretch of its recent
slots) and its plots of lag and duration over its recent attempts. Pure: ledger and rows in,
coordinates out (SVG user units), drawn by the schedule page's template."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from fleet.health.ledger import ScheduleLedger

WIDTH: Final = 1000.0  # the drawings' width; the page scales them
CELLS: Final = 120  # the coverage strip's cells
PLOT_H: Final = 120.0
PLOT_LEFT: Final = 60.0  # the value axis' labels
PLOT_TOP: Final = 8.0
PLOT_BOTTOM: Final = 18.0  # the time axis' labels
TICKS: Final = 5

# The outcomes of the ledger, worst first: a cell shows the worst outcome among its slots.
SEVERITY: Final = (
    "unexplained",
    "dead",
    "missed",
    "never_started",
    "skipped",
    "reclaimed",
    "retried",
    "running",
    "pending",
    "unplanned",
    "pruned",
    "once",
)
# What each outcome is called on the page.
COVERAGE_WORDS: Final[dict[str, str]] = {
    "unexplained": "missing, no reason recorded",
    "dead": "dead",
    "missed": "missed, with a recorded reason",
    "never_started": "created, never started",
    "skipped": "skipped by a policy",
    "reclaimed": "done after a lost lease",
    "retried": "done after retries",
    "running": "running",
    "pending": "pending",
    "unplanned": "not created yet",
    "pruned": "older than the retention",
    "once": "ran once",
    "none": "no slot",
}


@dataclass(frozen=True)
class Cell:
    x: float
    w: float
    start: datetime
    end: datetime
    outcome: str  # one of SEVERITY, or "none" for a stretch without slots


@dataclass(frozen=True)
class Coverage:
    start: datetime
    end: datetime
    cells: tuple[Cell, ...]
    counts: dict[str, int]
    slots: int
    ok: bool
    error: str | None
    left_off: int  # ranges the ledger left out: the strip may miss a few of them
    width: float = WIDTH


def coverage(ledger: ScheduleLedger, cells: int = CELLS) -> Coverage:
    """The ledger's window cut into `cells` equal stretches, each showing the worst outcome among
    the slots the ledger's ranges put in it; stretches without such ranges ran once (or held no
    slot, when the ledger counted none at all)."""
    start, end = ledger.start, ledger.end
    span = max((end - start).total_seconds(), 1e-6)
    step = (end - start) / cells
    worst = ["once" if ledger.slots else "none"] * cells
    rank = {outcome: i for i, outcome in enumerate(SEVERITY)}
    for entry in ledger.entries:
        if entry.outcome not in rank:  # runs that are not slots: no cell of their own
            continue
        first = _cell(entry.first, start, span, cells)
        last = _cell(entry.last, start, span, cells)
        for i in range(first, last + 1):
            if worst[i] == "none" or rank[entry.outcome] < rank.get(worst[i], len(SEVERITY)):
                worst[i] = entry.outcome
    w = WIDTH / cells
    drawn = tuple(
        Cell(round(i * w, 2), round(w, 2), start + step * i, start + step * (i + 1), worst[i])
        for i in range(cells)
    )
    return Coverage(
        start=start,
        end=end,
        cells=drawn,
        counts={k: v for k, v in ledger.counts.items() if v},
        slots=ledger.slots,
        ok=ledger.ok,
        error=ledger.error,
        left_off=ledger.entries_left_off,
    )


def _cell(at: datetime, start: datetime, span_s: float, cells: int) -> int:
    return min(cells - 1, max(0, int((at - start).total_seconds() / span_s * cells)))


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    slot: datetime
    attempt: int
    value_s: float
    outcome: str


@dataclass(frozen=True)
class Plot:
    """One measure over time: points, the value axis up to `top_s`, time ticks."""

    title: str
    points: tuple[Point, ...]
    top_s: float
    y_ticks: tuple[tuple[float, str], ...]  # (y, the value in words)
    x_ticks: tuple[tuple[float, datetime], ...]  # (x, instant)
    start: datetime
    end: datetime
    width: float = WIDTH
    height: float = PLOT_H
    left: float = PLOT_LEFT


def plots(attempts: list[dict[str, Any]], now: datetime) -> tuple[Plot, Plot]:
    """Lag (a slot's first start after its slot) and duration (each ended attempt) over the slots
    of `attempts` (attempt_recent rows, any order)."""
    first_starts = [a for a in attempts if a["attempt"] == 1 and a["started_at"] is not None]
    ended = [a for a in attempts if a["started_at"] is not None and a["finished_at"] is not None]
    slots = [a["scheduled_for"] for a in attempts]
    start = min(slots, default=now - timedelta(hours=1))
    end = max(slots, default=now)
    if end - start < timedelta(seconds=10):
        end = start + timedelta(seconds=10)
    lag = [(a, max(0.0, (a["started_at"] - a["scheduled_for"]).total_seconds())) for a in first_starts]
    took = [(a, max(0.0, (a["finished_at"] - a["started_at"]).total_seconds())) for a in ended]
    return (
        _plot("Lag: slot to first start", lag, start, end),
        _plot("Duration of each attempt", took, start, end),
    )


def _plot(title: str, values: list[tuple[dict[str, Any], float]], start: datetime, end: datetime) -> Plot:
    top = nice_top(max((v for _, v in values), default=0.0))
    span = (end - start).total_seconds()
    inner_w = WIDTH - PLOT_LEFT - 10
    inner_h = PLOT_H - PLOT_TOP - PLOT_BOTTOM

    def x_of(t: datetime) -> float:
        return round(PLOT_LEFT + inner_w * (t - start).total_seconds() / span, 2)

    def y_of(v: float) -> float:
        return round(PLOT_TOP + inner_h * (1 - v / top), 2)

    points = tuple(
        Point(
            x_of(a["scheduled_for"]), y_of(v), a["scheduled_for"], a["attempt"], v, a["outcome"] or "running"
        )
        for a, v in sorted(values, key=lambda p: (p[0]["scheduled_for"], p[0]["attempt"]))
    )
    y_ticks = tuple((y_of(top * i / 4), axis_label(top * i / 4)) for i in range(5))
    x_ticks = tuple(
        (x_of(start + (end - start) * i / (TICKS - 1)), start + (end - start) * i / (TICKS - 1))
        for i in range(TICKS)
    )
    return Plot(title, points, top, y_ticks, x_ticks, start, end)


def axis_label(seconds: float) -> str:
    """A value of the axis in words: ``0``, ``250µs``, ``12.5ms``, ``2.5s``, ``90s``."""
    if seconds == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g}{unit}"
    return f"{seconds / 1e-6:.3g}µs"


def nice_top(value_s: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten (from a millisecond on) at or above the value:
    the value axis' top."""
    value_s = max(value_s, 0.001)
    power = 10.0 ** math.floor(math.log10(value_s))
    for m in (1.0, 2.0, 5.0, 10.0):
        if value_s <= m * power * (1 + 1e-9):
            return m * power
    return 10.0 * power
