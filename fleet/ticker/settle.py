"""Runs created ahead of their time: confirmed when they come due while a ticker runs, settled by
the catch-up policy when no worker started them and no ticker saw them due within their grace."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

import psycopg

from fleet.observe import logs
from fleet.store.queries import q
from fleet.timing.catchup import StaleRun, settle_stale, settled_collapsed
from fleet.timing.window import window_json

# A run created ahead is confirmed by a ticker at the latest this long before its grace ends (or
# halfway through a shorter grace): the ticker's wake-up may be that late and the run still counts
# as seen on time.
CONFIRM_MARGIN = timedelta(seconds=2)
SETTLE_BATCH = 100  # schedules with stale runs settled per transaction


@dataclass
class SettleResult:
    schedules: int = 0  # schedules whose stale runs were settled
    kept: int = 0  # stale runs left to run (catch-up `latest` or `all`)
    skipped: int = 0  # stale runs recorded skipped
    still_stale: bool = False  # the batch was full: settle again at once


def run_once(
    conn: psycopg.Connection[Any], *, now: datetime | None = None, batch_size: int = SETTLE_BATCH
) -> SettleResult:
    """Confirm the runs created ahead that came due with this ticker running, then settle the stale
    ones of up to `batch_size` schedules in one transaction.

    A stale run is a slot that, had it not been created ahead, no ticker would have created in time:
    it is missed, and its schedule's catch-up policy decides, as it does for a slot created late
    (`fleet.timing.catchup.settle_stale`). Only schedules with nothing left to plan now are settled, so
    that `latest` sees the newest of their missed slots, whichever way each came to be missed.
    """
    result = SettleResult()
    with conn.transaction():
        locked = conn.execute(
            q("run_confirm_ahead"), {"now": now, "margin": CONFIRM_MARGIN, "limit": batch_size}
        ).fetchall()
        if not locked:
            return result
        schedules = {row["name"]: row for row in locked}
        stale = conn.execute(q("run_stale"), {"names": list(schedules), "now": now}).fetchall()
        names: list[str] = []
        slots: list[datetime] = []
        reasons: list[str | None] = []
        windows: list[str | None] = []
        for name, group in groupby(stale, key=lambda row: row["schedule_name"]):
            rows = list(group)
            schedule = schedules[name]
            runs = [StaleRun(row["scheduled_for"], row["start_by"], row["run_after"]) for row in rows]
            decided = settle_stale(
                schedule["catchup"],
                runs,
                rows[-1]["newer"],
                schedule["db_now"],
                max_lateness=schedule["max_lateness"],
                max_catchup=schedule["max_catchup"],
            )
            names.extend(name for _ in runs)
            slots.extend(run.slot for run in runs)
            reasons.extend(decided)
            # The first run kept stands for the runs skipped before it.
            collapsed = window_json(settled_collapsed(schedule["catchup"], runs, decided))
            first_kept = decided.index(None) if collapsed is not None else -1
            windows.extend(collapsed if i == first_kept else None for i in range(len(runs)))
            kept = sum(1 for reason in decided if reason is None)
            logs.event(
                "stale_runs_settled",
                schedule=name,
                policy=schedule["catchup"],
                kept=kept,
                skipped=len(runs) - kept,
                since=runs[0].slot,
            )
        settled = conn.execute(
            q("run_settle"),
            {"names": names, "slots": slots, "reasons": reasons, "windows": windows, "now": now},
        ).fetchall()
        result.schedules = len(schedules)
        result.kept = sum(1 for row in settled if row["status"] == "pending")
        result.skipped = len(settled) - result.kept
        result.still_stale = len(locked) == batch_size
        if result.kept:
            conn.execute(q("run_notify"))  # delivered at commit: workers wake for the runs kept
    return result
