"""The health roll-up: a chore of the tickers that keeps `fleet.schedule_stats` and the cron
schedules' cadence windows, so that reading every schedule's health costs O(schedules).

Each step merges the runs that finished since the chore's mark into the stats (newest wins), reading
them through job_runs_finished. `finished_at` is the finishing transaction's now(), its start: a run
whose transaction commits up to ROLLUP_MARGIN_S (in fleet.health.verdicts) later is still read by the next
step, which reaches back that far. The first pass (mark NULL, e.g. a database upgraded with millions
of runs) goes over the schedules by name, a batch per step, probing each one's newest runs through
its primary key; its start becomes the mark. A read (fleet.health.reading) adds the runs finished since the
mark minus the margin itself, so it is exact without waiting for the roll-up, and probes every
schedule itself until the first pass is over.

While runs are due and waiting for a worker (a herd of slots come due at once, a backlog), a step
leaves the merge for later, up to MERGE_DEFER_S after the last one: merging a burst's runs as they
finish would take a core from the workers draining it, and its snapshot would keep them from
marking the runs they claimed as dead in the pending index, so that each claim walks past them.
Reads stay exact meanwhile (they add what the roll-up has not merged yet).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

import psycopg

from fleet.health.verdicts import ROLLUP_MARGIN_S
from fleet.store.chores import Chore, Progress, Step
from fleet.store.queries import q
from fleet.timing.schedule import cadence_run, timing_of

CHORE: Final = "health_rollup"
# Schedules probed per step of the first pass or of a re-probe; cron cadences computed per step.
PROBE_BATCH: Final = 1000
CADENCE_BATCH: Final = 5000
# A cron schedule whose cadence cannot be computed now (no slot yet) is tried again this much later.
CADENCE_RETRY: Final = timedelta(minutes=1)
# A stored window runs over up to this many slots past the next one while their gaps are equal (an
# hourly cron's lasts about a day), so that it is moved on that much less often.
CADENCE_RUN: Final = 24
# Timings whose windows a ticker keeps between steps (a few hundred bytes each).
CADENCE_CACHE: Final = 20_000
# While runs wait to be claimed, the merge waits too, at most this long after the last one.
MERGE_DEFER_S: Final = 30.0


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
        mark, cursor = at.now, None
        if (
            at.now - at.mark < timedelta(seconds=MERGE_DEFER_S)
            and conn.execute(q("run_due_first"), {"now": at.now}).fetchone()
        ):
            mark = at.mark  # the merge waits for the workers
        else:
            conn.execute(q("stats_merge"), {"since": at.mark - timedelta(seconds=ROLLUP_MARGIN_S)})
        row = conn.execute(q("stats_probe"), {"dirty": True, "after": "", "limit": PROBE_BATCH}).fetchone()
        assert row is not None
        more = row["schedules"] == PROBE_BATCH
    if cadence_refresh(conn, at.now) >= CADENCE_BATCH:
        more = True
    return Step(more=more, mark=mark, cursor=cursor)


Window = tuple[datetime, timedelta | None, datetime | None, datetime]


class CadenceCache:
    """Cadence windows computed for timings (by timing_hash), kept across steps: a timing shared by
    many schedules is evaluated once per window, not once per step that meets one of them. Holds at
    most `size` windows; the oldest go first."""

    def __init__(self, size: int = CADENCE_CACHE) -> None:
        self.size = size
        self.windows: dict[str, Window] = {}

    def window(self, row: dict[str, Any], now: datetime) -> Window:
        key: str = row["timing_hash"]
        found = self.windows.get(key)
        if found is not None and found[0] <= now < (found[2] or found[3]):
            return found
        window = self.windows[key] = _window(row, now)
        while len(self.windows) > self.size:
            del self.windows[next(iter(self.windows))]
        return window


_CACHE = CadenceCache()


def cadence_refresh(
    conn: psycopg.Connection[Any],
    now: datetime,
    limit: int = CADENCE_BATCH,
    cache: CadenceCache | None = None,
) -> int:
    """Store the cadence windows around `now` of up to `limit` cron schedules whose windows end at
    or before it, and of up to `limit` whose windows belong to an older timing; returns how many were
    looked at. Each timing among them is evaluated once, and only when `cache` has no window of it
    covering `now`."""
    cache = _CACHE if cache is None else cache
    rows = conn.execute(q("schedule_cadence_stale"), {"now": now, "limit": limit}).fetchall()
    if not rows:
        return 0
    hashes: list[str] = []
    froms: list[datetime] = []
    gaps: list[timedelta | None] = []
    mids: list[datetime | None] = []
    untils: list[datetime] = []
    for r in rows:
        window = cache.window(r, now)
        hashes.append(r["timing_hash"])
        froms.append(window[0])
        gaps.append(window[1])
        mids.append(window[2])
        untils.append(window[3])
    conn.execute(
        q("schedule_cadence_set"),
        {
            "now": now,
            "limit": limit,
            "hashes": hashes,
            "froms": froms,
            "gaps": gaps,
            "mids": mids,
            "untils": untils,
        },
    )
    return sum(int(r["schedules"]) for r in rows)


def _window(row: dict[str, Any], now: datetime) -> Window:
    """The windows of the timing around `now`: from, the gap until mid, mid, until (see migrations
    009 and 011); no mid when none can be computed now, to be tried again at until."""
    try:
        run = cadence_run(timing_of({**row, "every": None}), now, CADENCE_RUN)
    except Exception:  # noqa: BLE001 - one schedule's timing never stops the roll-up (the ticker marks it broken)
        run = None
    if run is None:
        return now, None, None, now + CADENCE_RETRY
    return run
