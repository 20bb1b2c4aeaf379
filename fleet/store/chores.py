"""Housekeeping the tickers share, each step done once across them all (the alert processes share
a chore of their own the same way: reading the verdicts, fleet.alert.loop).

A chore (retention, the health roll-up) is a row of `fleet.store.chores`. Between ticks, a ticker takes
each due chore's row with FOR UPDATE SKIP LOCKED, runs one small step of it in the same transaction
and sets when it is due next: at once when the step says there is more to do, else `every_s` later.
Another ticker finds the row locked or not due, and skips it; the step's progress (`mark`, `cursor`)
is stored with the row, so the next step goes on from there whichever ticker takes it. A ticker that
dies mid-step rolls its step back, and the chore is taken again.

A step that fails (a statement error, a timeout, a bug) is rolled back, logged once as
`chore_failed`, and its chore is due again RETRY_S later, for every ticker: housekeeping never
stops the ticks, nor makes a ticker drop its connection. A lost connection and a missing grant are
the ticker's to handle, and are raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import psycopg

from fleet.observe import logs
from fleet.store.queries import q

# A failed step's chore is due again this much later.
RETRY_S: Final = 30.0


@dataclass(frozen=True)
class Progress:
    """Where a chore stands: what its last step stored, and the database's now."""

    now: datetime
    mark: datetime | None
    cursor: str | None


@dataclass(frozen=True)
class Step:
    """What a step did: `more` asks for the next step at once; `mark` and `cursor` are stored."""

    more: bool
    mark: datetime | None = None
    cursor: str | None = None


@dataclass(frozen=True)
class Chore:
    name: str
    every_s: float
    step: Callable[[psycopg.Connection[Any], Progress], Step]


def register(conn: psycopg.Connection[Any], chores: Sequence[Chore], now: datetime | None = None) -> None:
    """Add the chores' rows if missing (due at once)."""
    if chores:
        with conn.transaction():
            conn.execute(q("chore_add"), {"names": [c.name for c in chores], "now": now})


def run_due(conn: psycopg.Connection[Any], chores: Sequence[Chore], now: datetime | None = None) -> list[str]:
    """One step of each chore that is due and not held by another ticker, each in its own
    transaction; returns the names of the chores stepped."""
    stepped = []
    for chore in chores:
        try:
            with conn.transaction():
                row = conn.execute(q("chore_take"), {"name": chore.name, "now": now}).fetchone()
                if row is None:
                    continue
                result = chore.step(conn, Progress(now=row["db_now"], mark=row["mark"], cursor=row["cursor"]))
                conn.execute(
                    q("chore_done"),
                    {
                        "name": chore.name,
                        "now": now,
                        "due_in_s": 0.0 if result.more else chore.every_s,
                        "mark": result.mark,
                        "cursor": result.cursor,
                    },
                )
        except Exception as e:
            if conn.closed or conn.broken or isinstance(e, psycopg.errors.InsufficientPrivilege):
                raise
            logs.event("chore_failed", chore=chore.name, error=f"{type(e).__name__}: {str(e).strip()[:300]}")
            with conn.transaction():
                conn.execute(q("chore_postpone"), {"name": chore.name, "now": now, "due_in_s": RETRY_S})
            continue
        stepped.append(chore.name)
    return stepped


def next_wait(
    conn: psycopg.Connection[Any], chores: Sequence[Chore], now: datetime | None = None
) -> float | None:
    """Seconds until the earliest of the chores is due (0 or less: due now); None without chores."""
    if not chores:
        return None
    row = conn.execute(q("chore_next_wait"), {"names": [c.name for c in chores], "now": now}).fetchone()
    return None if row is None or row["wait_s"] is None else float(row["wait_s"])
