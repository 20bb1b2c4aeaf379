"""The bound the ticker's row rules put on a schedule's next slot and cadence (fleet/roles.sql,
fleet.timing_longest_gap) is never below a real gap between two slots: walked over years, in time
zones with and without daylight saving, with skipped wall times skipped or shifted. A bound too
tight would refuse a ticker's legitimate advance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import psycopg
import pytest

from fleet.store.migrate import migrate
from fleet.timing.schedule import Timing, slots_between
from tests.support import scalar

CRONS = [
    "* * * * *",
    "*/7 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9-17 * * *",
    "0 9 * * MON-FRI",
    "30 2 * * SUN",
    "0 0 13 * FRI",
    "0 0 1 * *",
    "0 0 31 * *",
    "30 2 31 * *",
    "0 0 L * *",
    "0 0 LW * *",
    "0 0 * * 1#5",
    "0 0 * * 5L",
    "0 0 1 1 *",
    "30 2 31 3 *",
    "0 0 * 6 *",
    "0 0 29 2 *",
    "0 0 0 29 2 *",
    "@hourly",
    "@weekly",
    "@monthly",
    "@yearly",
]
START = datetime(2024, 3, 29, tzinfo=UTC)
END = datetime(2104, 3, 1, tzinfo=UTC)
SLOTS = 5_000


@pytest.fixture(autouse=True)
def roles(conn: psycopg.Connection[Any]) -> None:
    """The rules' functions come with the roles."""
    migrate(conn, roles=True)


@pytest.mark.parametrize("dst_missing", ["shift", "skip"])
@pytest.mark.parametrize("timezone", ["Europe/Berlin", "America/Santiago"])
def test_no_cron_has_a_gap_longer_than_its_bound(
    conn: psycopg.Connection[Any], timezone: str, dst_missing: Literal["shift", "skip"]
) -> None:
    too_long = []
    for cron in CRONS:
        t = Timing(every=None, cron=cron, timezone=timezone, dst_missing=dst_missing)
        bound = scalar(conn, "SELECT fleet.timing_longest_gap(NULL, %s, %s)", (cron, dst_missing))
        slots = slots_between(t, START, END, SLOTS)
        gap = max((b - a for a, b in zip(slots, slots[1:], strict=False)), default=timedelta(0))
        if gap > bound:
            too_long.append((cron, gap, bound))
    assert not too_long


def test_an_interval_schedule_s_gap_is_its_every(conn: psycopg.Connection[Any]) -> None:
    gap = conn.execute(
        "SELECT fleet.timing_longest_gap(interval '3660 days', NULL, 'skip') AS gap"
    ).fetchone()
    assert gap == {"gap": timedelta(days=3660)}
