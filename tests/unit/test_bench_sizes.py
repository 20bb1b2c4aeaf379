"""The benchmark's pure parts for its large sections: the million schedules' file, the history's
batches, and the sizes a full run and a quick one use."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from fleet.timing.schedfile import load
from fleet.timing.schedule import first_slot_at_or_after, next_slot
from loadtest.bench.backlog import batches
from loadtest.bench.config import SECTIONS, SLOW_SECTIONS, options
from loadtest.bench.million import schedule_lines


def test_the_million_file_is_hourly_schedules_spread_over_every_second_of_the_hour() -> None:
    n = 3600 + 5
    specs = load("".join(schedule_lines(n)))
    assert len(specs) == n and len({s.name for s in specs}) == n
    hour = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)
    slots = [first_slot_at_or_after(s.timing, hour) for s in specs]
    assert all(slot is not None and hour <= slot < hour + timedelta(hours=1) for slot in slots)
    offsets = [int((slot - hour).total_seconds()) for slot in slots if slot is not None]
    assert offsets == [i % 3600 for i in range(n)]
    per_second = Counter(offsets)
    assert len(per_second) == 3600 and set(per_second.values()) == {1, 2}
    later = next_slot(specs[17].timing, hour + timedelta(seconds=17))
    assert later == hour + timedelta(hours=1, seconds=17)


def test_history_batches_cover_every_row_once() -> None:
    assert batches(5, 2) == [(1, 2), (3, 4), (5, 5)]
    assert batches(4, 2) == [(1, 2), (3, 4)]
    assert batches(1, 10) == [(1, 1)]
    assert batches(0, 10) == []
    big = batches(20_000_001, 2_000_000)
    assert len(big) == 11 and big[0] == (1, 2_000_000) and big[-1] == (20_000_001, 20_000_001)
    assert all(a[1] + 1 == b[0] for a, b in zip(big, big[1:], strict=False))


def test_a_full_run_drains_over_twenty_million_finished_runs_and_a_quick_one_stays_small() -> None:
    full = options(SECTIONS, False, None, None, (1, 2, 4))
    quick = options(SECTIONS, True, None, None, (1, 2, 4))
    assert full.history_rows == 20_000_000 and quick.history_rows <= 500_000
    assert {"million", "history"} <= set(SLOW_SECTIONS) <= set(SECTIONS)
