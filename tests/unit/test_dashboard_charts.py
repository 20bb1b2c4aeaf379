"""The coverage strip's and the plots' layout: worst outcome per stretch, value axes that hold
every point, time across."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.health.ledger import ScheduleLedger, SlotRange
from fleet.ops.dashboard.charts import SEVERITY, axis_label, coverage, nice_top, plots

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def ledger(*entries: SlotRange, slots: int = 100) -> ScheduleLedger:
    counts = dict.fromkeys(SEVERITY, 0)
    for e in entries:
        if e.outcome in counts:
            counts[e.outcome] += e.slots
    return ScheduleLedger(
        name="s",
        timing="every 1m",
        start=T0,
        end=T0 + timedelta(minutes=100),
        slots=slots,
        counts=counts,
        skipped={},
        missed={},
        not_a_slot=0,
        created_twice=0,
        by_operator=0,
        entries=entries,
        entries_left_off=0,
    )


def at(minute: float) -> datetime:
    return T0 + timedelta(minutes=minute)


def test_each_cell_shows_the_worst_outcome_among_its_slots() -> None:
    c = coverage(
        ledger(
            SlotRange("skipped", "overlap", at(10), at(10), 1),
            SlotRange("unexplained", "", at(11), at(11), 1),
            SlotRange("retried", "2 attempts", at(50), at(59), 10),
            SlotRange("not_a_slot", "", at(70), at(70), 1),
        ),
        cells=10,
    )
    assert [cell.outcome for cell in c.cells] == [
        "once", "unexplained", "once", "once", "once", "retried", "once", "once", "once", "once",
    ]  # fmt: skip
    assert c.cells[0].x == 0 and c.cells[-1].x + c.cells[-1].w == 1000
    assert not c.ok and c.counts == {"skipped": 1, "unexplained": 1, "retried": 10}


def test_a_window_without_slots_shows_none() -> None:
    c = coverage(ledger(slots=0), cells=4)
    assert [cell.outcome for cell in c.cells] == ["none"] * 4


def test_the_value_axis_holds_every_point() -> None:
    assert [nice_top(v) for v in (0, 0.0004, 0.003, 0.02, 0.7, 1.0, 1.3, 4.5, 99)] == [
        0.001, 0.001, 0.005, 0.02, 1.0, 1.0, 2.0, 5.0, 100.0,
    ]  # fmt: skip
    rows = [
        {
            "scheduled_for": at(m),
            "attempt": a,
            "started_at": at(m) + timedelta(seconds=m / 10),
            "finished_at": at(m) + timedelta(seconds=m / 10 + 2 * a),
            "outcome": "done" if a == 2 else "failed",
        }
        for m in range(0, 60, 5)
        for a in (1, 2)
    ]
    lag, took = plots(rows, at(60))
    assert len(lag.points) == 12 and len(took.points) == 24
    assert lag.top_s == 10.0 and max(p.value_s for p in lag.points) == 5.5
    assert took.top_s == 5.0 and max(p.value_s for p in took.points) == 4.0
    assert all(8 <= p.y <= 102 for p in lag.points + took.points)
    assert [p.x for p in lag.points] == sorted(p.x for p in lag.points)
    assert [label for _, label in lag.y_ticks] == ["0", "2.5s", "5s", "7.5s", "10s"]
    assert [axis_label(v) for v in (0.0125, 0.00025, 90, 0.001)] == ["12.5ms", "250µs", "90s", "1ms"]
    empty_lag, _ = plots([], at(60))
    assert empty_lag.points == () and empty_lag.top_s == 0.001
