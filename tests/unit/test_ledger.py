"""The slot ledger's merge (fleet.health.ledger), without a database: each classification, the facts'
order, the settling of slots without a run, and the same ledger however the streams are chunked
(the block comparison of aligned runs agrees with the slot-by-slot walk)."""

from __future__ import annotations

import random
from array import array
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.health.ledger import (
    BLOCK,
    DEAD,
    DONE,
    ONCE_CODE,
    OPERATOR,
    PENDING,
    RECLAIMED,
    RUNNING,
    Facts,
    Ledger,
    ScheduleLedger,
    instant,
    micros,
)
from fleet.timing.schedule import DROPPED_COUNT_LIMIT

M = 60_000_000  # a minute in microseconds
START = datetime(2026, 3, 1, tzinfo=UTC)
T0 = micros(START)


def code(kind: int, attempts: int = 1, operator: bool = False) -> int:
    return attempts << 8 | kind | (OPERATOR if operator else 0)


def chunked(values: list[int], sizes: list[int]) -> list[array[int]]:
    out, i = [], 0
    for n in sizes:
        out.append(array("q", values[i : i + n]))
        i += n
    if i < len(values):
        out.append(array("q", values[i:]))
    return out


def ledger(
    slots: list[int],
    runs: list[tuple[int, int]],
    facts: Facts | None = None,
    *,
    limit: int = 1000,
    slot_sizes: list[int] | None = None,
    run_sizes: list[int] | None = None,
) -> ScheduleLedger:
    """The ledger of `slots` (minutes from T0) and `runs` ((minute, code)), chunked as told."""
    f = facts or Facts(now=T0 + 10_000 * M, created=T0)
    s_values = [T0 + m * M for m in slots]
    t_values = [T0 + m * M for m, _ in runs]
    codes = [c for _, c in runs]
    s_chunks = chunked(s_values, slot_sizes or [len(s_values)])
    run_chunks = list(
        zip(
            chunked(t_values, run_sizes or [len(t_values)]),
            chunked(codes, run_sizes or [len(codes)]),
            strict=True,
        )
    )
    led = Ledger(f, limit)
    led.merge(s_chunks, run_chunks)
    return led.result("s", "every 1m", START, instant(T0 + 10_000 * M))


def nonzero(d: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in d.items() if v}


def test_a_run_per_slot_is_proved_in_blocks() -> None:
    n = 3 * BLOCK + 17
    led = ledger(list(range(n)), [(m, ONCE_CODE) for m in range(n)], slot_sizes=[1000, 5, 2000])
    assert led.ok and led.slots == n and nonzero(led.counts) == {"once": n} and led.entries == ()


def test_each_state_of_a_run() -> None:
    runs = [
        (0, code(DONE)),
        (1, code(DONE, 4)),
        (2, code(RECLAIMED, 2)),
        (3, code(DEAD, 6)),
        (4, code(PENDING, 2)),
        (5, code(RUNNING, 1)),
        (6, code(PENDING, 0)),
        (7, code(6)),
        (8, code(7)),
        (9, code(8)),
        (10, code(9)),
        (11, code(10)),
        (12, code(DONE, 1, operator=True)),
        (13, code(10)),  # on a date the calendar excludes
    ]
    # the pending run at minute 6 is past its grace; one at the last minute would not be
    facts = Facts(
        now=T0 + 14 * M + 10_000_000, created=T0, grace=30_000_000, excluded=lambda us: us == T0 + 13 * M
    )
    led = ledger(list(range(15)), [*runs, (14, code(PENDING, 0))], facts)
    assert nonzero(led.counts) == {
        "once": 2,
        "retried": 1,
        "reclaimed": 1,
        "dead": 1,
        "pending": 2,
        "running": 1,
        "never_started": 1,
        "skipped": 6,
    }
    assert led.skipped == {
        "catchup": 1,
        "max_lateness": 1,
        "overlap": 1,
        "calendar": 1,
        "discarded": 1,
        "other": 1,
    }
    assert ("skipped", "skipped: a date the schedule's calendar excludes") in [
        (e.outcome, e.reason) for e in led.entries
    ]
    assert led.by_operator == 1 and led.ok
    assert [(e.outcome, e.reason) for e in led.entries][:4] == [
        ("retried", "done after 4 attempts"),
        ("reclaimed", "done after 2 attempts; a lease ran out and the run was reclaimed"),
        ("dead", "dead after 6 attempt(s)"),
        ("pending", "waiting to retry after attempt 2"),
    ]
    assert led.entries[-1].reason == "due, not started yet"


def test_facts_explain_missing_slots_in_their_order() -> None:
    # minute 0-9 before creation, 10-19 past retention, 20-29 with no record, 30-39 not planned
    # yet, 40-49 paused (the pause wins over the ticker's next slot)
    facts = Facts(
        now=T0 + 100 * M,
        created=T0 + 10 * M,
        cutoff=T0 + 20 * M,
        planned_until=T0 + 30 * M,
        paused=T0 + 40 * M,
        paused_text="paused since then",
    )
    led = ledger(list(range(50)), [], facts)
    assert nonzero(led.counts) == {"missed": 20, "pruned": 10, "unexplained": 10, "unplanned": 10}
    assert nonzero(led.missed) == {"before_created": 10, "paused": 10}
    assert [(e.outcome, e.first, e.slots) for e in led.entries] == [
        ("missed", START, 10),
        ("pruned", instant(T0 + 10 * M), 10),
        ("unexplained", instant(T0 + 20 * M), 10),
        ("unplanned", instant(T0 + 30 * M), 10),
        ("missed", instant(T0 + 40 * M), 10),
    ]
    broken = Facts(now=T0 + 100 * M, created=T0, broken=T0 + 5 * M, disabled=T0 + 2 * M)
    led = ledger(list(range(10)), [(0, ONCE_CODE), (1, ONCE_CODE)], broken)
    assert nonzero(led.missed) == {"disabled": 3, "broken": 5}


def test_catch_up_explains_what_it_counted_and_no_more() -> None:
    slots = list(range(20))
    runs = [(m, ONCE_CODE) for m in slots if m not in (3, 4, 10)]
    counted = Facts(now=T0 + 100 * M, created=T0, missed_slots=3, catchup="skip")
    led = ledger(slots, runs, counted)
    assert led.ok and nonzero(led.missed) == {"catchup": 3}
    assert led.entries[0].reason == "dropped by catch-up skip (counted in missed_slots)"
    short = Facts(now=T0 + 100 * M, created=T0, missed_slots=2)
    led = ledger(slots, runs, short)
    assert not led.ok and led.counts["unexplained"] == 3
    assert led.entries[0].reason.endswith(
        "(3 slot(s) missing, more than the catch-up counted: missed_slots = 2)"
    )
    # a drop longer than what one catch-up counts is counted as that many
    n = DROPPED_COUNT_LIMIT + 5
    led = ledger(
        list(range(n + 1)),
        [(n, ONCE_CODE)],
        Facts(now=T0 + 2 * n * M, created=T0, missed_slots=DROPPED_COUNT_LIMIT),
    )
    assert led.ok and led.missed["catchup"] == n


def test_an_earlier_timing_explains_only_slots_between_its_runs() -> None:
    slots = list(range(10))
    # runs at half minutes up to 4.5 (as every 1m from :30), then on the minute from 5
    t_values = [T0 + m * M + M // 2 for m in range(5)] + [T0 + m * M for m in range(5, 10)]
    led = Ledger(Facts(now=T0 + 100 * M, created=T0), 100)
    led.merge(
        [array("q", [T0 + m * M for m in slots])], [(array("q", t_values), array("q", [ONCE_CODE] * 10))]
    )
    result = led.result("s", "every 1m", START, START)
    assert result.ok and nonzero(result.missed) == {"timing_changed": 5} and result.not_a_slot == 5
    # one run off its slot between runs on theirs is no change of timing: the slot is missing
    t_values = [T0, T0 + M, T0 + 2 * M + M // 2, T0 + 3 * M]
    led = Ledger(Facts(now=T0 + 100 * M, created=T0), 100)
    led.merge(
        [array("q", [T0 + m * M for m in range(4)])], [(array("q", t_values), array("q", [ONCE_CODE] * 4))]
    )
    result = led.result("s", "every 1m", START, START)
    assert not result.ok and result.counts["unexplained"] == 1 and result.not_a_slot == 1


def test_runs_of_an_operator_and_a_slot_created_twice() -> None:
    runs = [(0, ONCE_CODE), (0, ONCE_CODE), (1, code(DONE, 1, operator=True))]
    led = ledger([0, 1], runs)
    assert led.created_twice == 1 and led.by_operator == 1 and led.counts["once"] == 2
    # an operator's run at its own instant is not the timing's business
    merged = Ledger(Facts(now=T0 + 100 * M, created=T0), 100)
    merged.merge(
        [array("q", [T0, T0 + M])],
        [(array("q", [T0, T0 + 7, T0 + M]), array("q", [ONCE_CODE, code(DONE, 1, True), ONCE_CODE]))],
    )
    assert merged.result("s", "", START, START).not_a_slot == 0


def test_the_limit_keeps_unexplained_ranges_first_and_counts_the_rest() -> None:
    runs = [(m, code(DONE, 2) if m % 2 else ONCE_CODE) for m in range(40)]
    runs = [r for r in runs if r[0] != 35]
    led = ledger(list(range(40)), runs, limit=3)
    assert [e.outcome for e in led.entries] == ["retried", "retried", "unexplained"]
    assert led.entries_left_off == 20 - 3 and led.counts["retried"] == 19


@st.composite
def streams(draw: Any) -> tuple[list[int], list[tuple[int, int]], list[int], list[int]]:
    n = draw(st.integers(0, 3 * BLOCK))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    slots = sorted(rnd.sample(range(2 * n + 1), n))
    runs: dict[int, int] = {}
    for m in slots:
        if rnd.random() < 0.9:
            runs[m] = ONCE_CODE if rnd.random() < 0.9 else rnd.choice([code(DONE, 3), code(DEAD, 6), code(7)])
    for m in rnd.sample(range(2 * n + 1), min(5, n)):
        runs.setdefault(m, ONCE_CODE)  # a few runs between the slots
    chunk_sizes = [draw(st.integers(1, 2 * BLOCK)) for _ in range(8)]
    run_sizes = [draw(st.integers(1, 2 * BLOCK)) for _ in range(8)]
    return slots, sorted(runs.items()), chunk_sizes, run_sizes


@settings(max_examples=60, deadline=None)
@given(streams())
def test_chunking_never_changes_the_ledger(
    case: tuple[list[int], list[tuple[int, int]], list[int], list[int]],
) -> None:
    slots, runs, slot_sizes, run_sizes = case
    facts = Facts(
        now=T0 + 10_000 * M, created=T0, missed_slots=7, cutoff=T0 + 50 * M, planned_until=T0 + 5000 * M
    )
    whole = ledger(slots, runs, facts)
    assert ledger(slots, runs, facts, slot_sizes=slot_sizes, run_sizes=run_sizes) == whole
    assert ledger(slots, runs, facts, slot_sizes=[1] * len(slots), run_sizes=[1] * len(runs)) == whole
    # and the counts are those of a walk slot by slot
    ran = dict(runs)
    on_slots = [ran.get(m) for m in slots]
    assert whole.counts["once"] == on_slots.count(ONCE_CODE)
    assert whole.counts["retried"] == on_slots.count(code(DONE, 3))
    assert whole.counts["dead"] == on_slots.count(code(DEAD, 6))
    assert whole.skipped["max_lateness"] == on_slots.count(code(7))
    gone = [m for m in slots if m not in ran]
    assert whole.counts["pruned"] == sum(1 for m in gone if m < 50)
    unplanned = sum(1 for m in gone if m >= 5000)
    assert whole.counts["unplanned"] == unplanned
    assert whole.counts["missed"] + whole.counts["unexplained"] == sum(1 for m in gone if m >= 50) - unplanned
    assert whole.not_a_slot == len(set(ran) - set(slots))
    assert whole.slots == len(slots)
