"""The health roll-up: a chore of the tickers that keeps `fleet.schedule_stats` and the cron
schedules' cadence windows, so that reading every schedule's health costs O(schedules).

Each step merges the runs that finished since the chore's mark into the stats (newest wins), reading
them through job_runs_finished. `finished_at` is the finishing transaction's now(), its start: a run
whose transaction commits up to MARGIN_S later is still read by the next step, which reaches back
that far. The first pass (mark NULL, e.g. a database upgraded with millions of runs) goes over the
schedules by name, a batch per step, probing each one's newest runs through its primary key; its
start becomes the mark. A read (fleet.inspect) adds the runs finished since the mark minus the
margin itself, so it is exact without waiting for the roll-up, and probes every schedule itself
until the first pass is over.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

import psycopg

from fleet.chores import Chore, Progress, Step
from fleet.queries import q
from fleet.schedule import TimingError, cadence_slots, timing_of

CHORE: Final = "health_rollup"
# How far a step (and a read) reaches back before the mark: a finishing transaction that commits
# later than this after it started would be missed by the stats.
MARGIN_S: Final = 30.0
# Schedules probed per step of the first pass or of a re-probe; cron cadences computed per step.
PROBE_BATCH: Final = 1000
CADENCE_BATCH: Final = 5000
# A cron schedule whose cadence cannot be computed now (no slot yet) is tried again this much later.
CADENCE_RETRY: Final = timedelta(minutes=1)


def rollup_chore(every_s: float) -> Chore:
    """The roll-up as a chore, due every `every_s` seconds."""
    return Chore(name=CHORE, every_s=every_s, step=rollup_step)


def rollup_step(conn: psycopg.Connection[Any], at: Progress) -> Step:
    """One step: a batch of the first pass while it lasts, else the runs finished since the mark;
    then a batch of dirty schedules and of stale cron cadences. Runs inside the chore's transaction."""
    more = False
    if at.mark is None or at.cursor is not None:
        start = at.now if at.mark is None else at.mark
        row = conn.execute(
            q("stats_probe"), {"dirty": False, "after": at.cursor or "", "limit": PROBE_BATCH}
        ).fetchone()
        assert row is not None
        if row["schedules"] == PROBE_BATCH:
            mark, cursor, more = start, row["last_name"], True
        else:
            mark, cursor = start, None
    else:
        conn.execute(q("stats_merge"), {"since": at.mark - timedelta(seconds=MARGIN_S)})
        mark, cursor = at.now, None
        row = conn.execute(q("stats_probe"), {"dirty": True, "after": "", "limit": PROBE_BATCH}).fetchone()
        assert row is not None
        more = row["schedules"] == PROBE_BATCH
    if cadence_refresh(conn, at.now) == CADENCE_BATCH:
        more = True
    return Step(more=more, mark=mark, cursor=cursor)


def cadence_refresh(conn: psycopg.Connection[Any], now: datetime, limit: int = CADENCE_BATCH) -> int:
    """Store the cadence windows around `now` of up to `limit` cron schedules whose windows do not
    cover it; returns how many were looked at. Schedules with the same timing share one evaluation."""
    rows = conn.execute(q("schedule_cadence_stale"), {"now": now, "limit": limit}).fetchall()
    if not rows:
        return 0
    found: dict[tuple[Any, ...], tuple[datetime, datetime | None, datetime]] = {}
    names: list[str] = []
    froms: list[datetime] = []
    mids: list[datetime | None] = []
    untils: list[datetime] = []
    hashes: list[str] = []
    for r in rows:
        key = (r["cron"], r["timezone"], r["start_at"], r["dst_repeated"], r["dst_missing"])
        window = found.get(key)
        if window is None:
            window = found[key] = _window(r, now)
        names.append(r["name"])
        froms.append(window[0])
        mids.append(window[1])
        untils.append(window[2])
        hashes.append(r["timing_hash"])
    conn.execute(
        q("schedule_cadence_set"),
        {"names": names, "froms": froms, "mids": mids, "untils": untils, "hashes": hashes},
    )
    return len(rows)


def _window(row: dict[str, Any], now: datetime) -> tuple[datetime, datetime | None, datetime]:
    try:
        slots = cadence_slots(timing_of(row), now)
    except (TimingError, ValueError):
        slots = None
    if slots is None:
        return now, None, now + CADENCE_RETRY
    return slots
