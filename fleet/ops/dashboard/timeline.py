"""A schedule's timeline, laid out: time across, one lane per worker, each attempt a bar from its
claim to its end, and a lane of slots above. Pure: rows in, coordinates out (SVG user units)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

WIDTH: Final = 1000.0  # the drawing's width; the page scales it
LABEL_W: Final = 170.0  # the lane names' column
LANE_H: Final = 26.0
SLOT_LANE_H: Final = 22.0
AXIS_H: Final = 22.0
MIN_BAR_W: Final = 3.0
TICKS: Final = 5

# How each attempt outcome is called on the page.
OUTCOME_WORDS: Final[dict[str, str]] = {
    "done": "done",
    "failed": "failed, retried",
    "timeout": "timed out",
    "dead": "dead",
    "lease_expired": "lease lost, reclaimed",
    "handed_back": "handed back",
    "running": "running",
}


@dataclass
class Bar:
    x: float
    w: float
    y: float
    slot: datetime
    attempt: int
    worker: str
    outcome: str  # an attempt outcome, or 'running'
    started_at: datetime
    finished_at: datetime | None
    error: str | None
    zombie: bool = False  # the worker lived on after losing the lease: its late writes were fenced

    @property
    def label(self) -> str:
        word = OUTCOME_WORDS.get(self.outcome, self.outcome)
        return f"{word}; zombie: its later writes were fenced" if self.zombie else word


@dataclass
class Lane:
    worker: str
    host: str | None
    y: float
    bars: list[Bar] = field(default_factory=list)


@dataclass
class SlotMark:
    x: float
    slot: datetime
    status: str  # pending | retrying | running | done | dead | skipped | discarded
    reason: str | None  # why skipped


@dataclass
class Tick:
    x: float
    at: datetime


@dataclass
class Timeline:
    start: datetime
    end: datetime
    lanes: list[Lane]
    slots: list[SlotMark]
    ticks: list[Tick]
    height: float
    lane_top: float
    width: float = WIDTH
    label_w: float = LABEL_W


def run_status(run: dict[str, Any]) -> str:
    """A run's status as people read it: a discarded dead run is `discarded`, not `skipped`, and a
    pending run after a failed attempt is `retrying` (it waits out its back-off, or is due again)."""
    if run["status"] == "skipped" and run.get("last_outcome") == "discarded":
        return "discarded"
    if run["status"] == "pending" and run.get("failures", 0) > 0:
        return "retrying"
    return str(run["status"])


def layout(
    runs: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    seen: dict[str, datetime],
    now: datetime,
) -> Timeline:
    """The timeline of `runs` (a page of run_page rows) and their ended `attempts` (attempt_range
    rows); the attempt in flight comes from its run row. `seen` holds when each worker was last
    seen alive: a worker seen after its lease was reclaimed is marked a zombie."""
    bars: list[dict[str, Any]] = [dict(a) for a in attempts]
    ended = {(a["scheduled_for"], a["attempt"]) for a in attempts}
    for r in runs:
        in_flight = r["status"] == "running" and r["started_at"] is not None and r["locked_by"]
        if in_flight and (r["scheduled_for"], r["attempts"]) not in ended:
            bars.append(
                {
                    "scheduled_for": r["scheduled_for"],
                    "attempt": r["attempts"],
                    "worker_id": r["locked_by"],
                    "host": r["locked_host"],
                    "started_at": r["started_at"],
                    "finished_at": None,
                    "outcome": "running",
                    "error": None,
                }
            )
    instants = [r["scheduled_for"] for r in runs]
    instants += [b["started_at"] for b in bars] + [b["finished_at"] or now for b in bars]
    start = min(instants, default=now - timedelta(hours=1))
    end = max(instants, default=now)
    if end - start < timedelta(seconds=10):
        end = start + timedelta(seconds=10)
    span = (end - start).total_seconds()
    inner = WIDTH - LABEL_W - 10

    def x_of(t: datetime) -> float:
        return round(LABEL_W + inner * (t - start).total_seconds() / span, 2)

    lane_top = AXIS_H + SLOT_LANE_H + 6
    lanes: dict[str, Lane] = {}
    # lanes in order of each worker's first attempt
    for b in sorted(bars, key=lambda b: (b["started_at"], b["attempt"])):
        worker = b["worker_id"] or "?"
        lane = lanes.get(worker)
        if lane is None:
            lane = lanes[worker] = Lane(worker, b.get("host"), lane_top + LANE_H * len(lanes))
        x = x_of(b["started_at"])
        w = max(MIN_BAR_W, x_of(b["finished_at"] or now) - x)
        zombie = (
            b["outcome"] == "lease_expired"
            and b["finished_at"] is not None
            and worker in seen
            and seen[worker] > b["finished_at"]
        )
        lane.bars.append(
            Bar(
                x=x,
                w=round(w, 2),
                y=lane.y + 4,
                slot=b["scheduled_for"],
                attempt=b["attempt"],
                worker=worker,
                outcome=b["outcome"] or "unknown",
                started_at=b["started_at"],
                finished_at=b["finished_at"],
                error=b["error"],
                zombie=zombie,
            )
        )
    slots = [
        SlotMark(
            x=x_of(r["scheduled_for"]),
            slot=r["scheduled_for"],
            status=run_status(r),
            reason=r["last_error"] if r["status"] == "skipped" else None,
        )
        for r in sorted(runs, key=lambda r: r["scheduled_for"])
    ]
    ticks = [
        Tick(x_of(start + (end - start) * i / (TICKS - 1)), start + (end - start) * i / (TICKS - 1))
        for i in range(TICKS)
    ]
    height = lane_top + LANE_H * max(1, len(lanes)) + 4
    return Timeline(start, end, list(lanes.values()), slots, ticks, height, lane_top)
