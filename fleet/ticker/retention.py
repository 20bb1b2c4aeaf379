"""Built-in retention: the tickers remove finished runs older than their schedule's retention.

A pass is a chore (fleet.store.chores): one ticker at a time takes a small step of it between ticks, and
the next step goes on from the stored position, whichever ticker takes it. A pass walks the
schedules in name order and, within a schedule, its runs along the primary key, deleting at most
`batch` runs per step; it costs about one index probe per schedule (all of a step's schedules in one
statement) plus a statement for each schedule with runs to delete. The cutoffs are fixed when the
pass starts (its `mark`), so a pass is exact per schedule as of then.
What a pass removes leaves each slot's outcome behind in the slot ledger (fleet.slot_outcomes), which
the pass's last step trims to the ledger's own retention. The last step also removes audit rows
(fleet.admin.audit) older than their schedule's retention, at most `batch` of them (they are few: one per
operator action). One `retention_pass` line is logged when a pass ends, with what it removed in all
its steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg

from fleet.observe import logs
from fleet.process.settings import DEFAULT_LEDGER_RETENTION
from fleet.store.chores import Chore, Progress, Step
from fleet.store.queries import q

RETENTION_CHORE = "retention"
# Schedules looked at in one step at most (one index probe each, and a short statement each of
# those with runs to remove), so that a step stays short however many schedules have nothing to
# remove, and a pass over a million schedules takes a thousand steps.
SCHEDULES_PER_STEP = 1000
_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
# Batches of outcomes (each up to a step's runs of one schedule) the slot ledger drops in one pass at
# most: a pass an hour keeps up with far more than a fleet removes in an hour.
OUTCOME_ROWS_PER_PASS = 20_000


@dataclass(frozen=True)
class Position:
    """Where a pass stands: `schedule` is being worked on after `slot`, or (no `slot`) is finished;
    `runs` and `steps` are what the pass has done so far."""

    schedule: str = ""
    slot: datetime | None = None
    runs: int = 0
    steps: int = 0

    def dump(self) -> str:
        return orjson.dumps(
            {
                "schedule": self.schedule,
                "slot": self.slot.isoformat() if self.slot else None,
                "runs": self.runs,
                "steps": self.steps,
            }
        ).decode()

    @classmethod
    def load(cls, cursor: str | None) -> Position:
        if not cursor:
            return cls()
        d = orjson.loads(cursor)
        slot = datetime.fromisoformat(d["slot"]) if d.get("slot") else None
        return cls(str(d["schedule"]), slot, int(d["runs"]), int(d["steps"]))


def retention_step(
    conn: psycopg.Connection[Any],
    progress: Progress,
    *,
    default: timedelta,
    batch: int,
    ticker_id: str = "",
    schedules_per_step: int = SCHEDULES_PER_STEP,
    ledger: timedelta | None = DEFAULT_LEDGER_RETENTION,
) -> Step:
    """Delete up to `batch` expired runs, going on from where the pass stands, leaving each one's
    outcome in the slot ledger (unless `ledger` is None); `more` until the pass has looked at every
    schedule. The pass's last step also removes outcomes whose slot is older than `ledger`."""
    began = time.monotonic()
    start = progress.mark or progress.now
    pos = Position.load(progress.cursor)
    page = conn.execute(
        q("schedule_retention_page"),
        {
            "start": start,
            "default": default,
            "after": pos.schedule,
            "inclusive": pos.slot is not None,
            "limit": schedules_per_step,
        },
    ).fetchall()
    removed = 0
    if ledger is None:
        conn.execute(q("outcome_keep_none"))
    for row in page:
        name = row["name"]
        if name is None:
            continue  # no schedule of the page has anything to remove
        # only schedules with runs older than their cutoff come back, each with its own statement
        room = batch - removed
        after = pos.slot if name == pos.schedule and pos.slot is not None else _EARLIEST
        got = conn.execute(
            q("run_expire"),
            {"name": name, "cutoff": row["cutoff"], "after": after, "limit": room},
        ).fetchone()
        assert got is not None
        removed += got["runs"]
        if got["found"] >= room:  # the batch is full: this schedule may have more
            here = Position(name, got["last_slot"], pos.runs + removed, pos.steps + 1)
            return Step(more=True, mark=start, cursor=here.dump())
    if page[0]["schedules"] == schedules_per_step:
        here = Position(page[0]["last_name"], None, pos.runs + removed, pos.steps + 1)
        return Step(more=True, mark=start, cursor=here.dump())
    outcomes = conn.execute(
        q("outcome_expire"),
        {"cutoff": None if ledger is None else start - ledger, "limit": OUTCOME_ROWS_PER_PASS},
    ).fetchone()
    assert outcomes is not None
    audit_rows = conn.execute(
        q("audit_expire"), {"start": start, "default": default, "limit": batch}
    ).rowcount
    # the pass took from its start to this step's, plus this step
    took = (progress.now - start).total_seconds() + time.monotonic() - began
    logs.event(
        "retention_pass",
        ticker_id=ticker_id,
        runs=pos.runs + removed,
        ledger_batches_removed=outcomes["removed"],
        audit_rows=audit_rows,
        steps=pos.steps + 1,
        duration_s=round(took, 3),
        default_retention_s=default.total_seconds(),
    )
    return Step(more=False)


def retention_chore(
    default: timedelta,
    every_s: float,
    batch: int,
    ticker_id: str = "",
    ledger: timedelta | None = DEFAULT_LEDGER_RETENTION,
) -> Chore:
    """The retention pass as a chore: a pass every `every_s`, `batch` runs per step at most."""

    def step(conn: psycopg.Connection[Any], progress: Progress) -> Step:
        return retention_step(
            conn, progress, default=default, batch=batch, ticker_id=ticker_id, ledger=ledger
        )

    return Chore(RETENTION_CHORE, every_s=every_s, step=step)
