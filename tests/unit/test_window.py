"""The run's window and result, and the start spread, as pure logic: what a handler may return, how
a stored window is read, where a schedule's runs start within its spread, what the file accepts,
and how the catch-up policy names the slots it folds into a run."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from fleet.timing.catchup import StaleRun, plan_slots, settle_stale, settled_collapsed
from fleet.timing.schedfile import parse_entry, spread_offset
from fleet.timing.schedule import Timing
from fleet.timing.window import MAX_RESULT_BYTES, NO_WINDOW, Collapsed, Window, result_json, window_of
from fleet.worker.attempt import Attempt, returned
from fleet.worker.finish import decide

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
QUARTER = Timing(every=15 * MIN)


# ---------------------------------------------------------------------------------------------------
# What a handler may return


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ({"cursor": 12345, "seen": ["a", "b"]}, b'{"cursor":12345,"seen":["a","b"]}'),
        ((1, 2.5, None, True), b"[1,2.5,null,true]"),  # a tuple is an array
        ("2026-11-02", b'"2026-11-02"'),
        (0, b"0"),
        (False, b"false"),
    ],
)
def test_a_json_value_is_stored_as_it_was_returned(value: Any, stored: bytes) -> None:
    assert result_json(value) == (stored, None)
    assert returned(value) == ("done", None, stored)


def test_none_is_no_result() -> None:
    assert result_json(None) == (None, None)
    assert returned(None) == ("done", None, None)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({1, 2}, "not JSON"),
        (datetime(2026, 1, 1, tzinfo=UTC), "not JSON"),  # would come back as a string
        (uuid.UUID(int=1), "a UUID is not a JSON value"),
        ({1: "a"}, "not JSON"),  # keys are strings in JSON
        (2**70, "not JSON"),
        ({"rate": float("inf")}, "inf is not a finite number"),
        ([float("nan")], "nan is not a finite number"),
        ({"a\x00": 1}, "NUL character"),
        (object(), "not JSON"),
    ],
)
def test_a_value_json_cannot_hold_is_refused_naming_the_result(value: Any, why: str) -> None:
    stored, problem = result_json(value)
    assert stored is None and problem is not None
    assert problem.startswith("result: the handler returned a value that is not JSON") and why in problem
    assert "\n" not in problem


def test_a_result_over_the_cap_is_refused_naming_the_cap() -> None:
    fits = "x" * (MAX_RESULT_BYTES - 2)  # with its two quotes: exactly the cap
    assert result_json(fits) == (f'"{fits}"'.encode(), None)
    stored, problem = result_json(fits + "x")
    assert stored is None
    assert problem == (
        "result: 8,193 bytes of JSON, more than the 8,192 a run may store"
        " (return a cursor or a summary; keep larger state in your own tables)"
    )


def test_a_result_that_cannot_be_stored_makes_the_run_dead_at_once() -> None:
    # The same code would return the same value again: no retry, the run is dead with the reason.
    verdict, error, stored = returned("x" * MAX_RESULT_BYTES)
    assert (verdict, stored) == ("permanent", None) and error is not None
    attempt = Attempt("s", T0, "noop", {}, 1, 0, None, 6, timedelta(seconds=30), timedelta(minutes=15), T0)
    outcome = decide(attempt, verdict, error)
    assert (outcome.status, outcome.error, outcome.result) == ("dead", error, None)


# ---------------------------------------------------------------------------------------------------
# A stored window, read


def test_no_stored_window_is_the_empty_one() -> None:
    assert window_of(None) is NO_WINDOW and window_of({}) is NO_WINDOW
    assert Window(None, None, None) == NO_WINDOW and NO_WINDOW.first_run


def test_a_stored_window_is_read_whole() -> None:
    w = window_of(
        {
            "previous_slot": "2026-11-02T11:00:00+01:00",
            "previous_result": {"cursor": 7},
            "collapsed": 2,
            "collapsed_first": "2026-11-02T10:15:00+00:00",
            "collapsed_last": "2026-11-02T10:30:00.000001+00:00",
        }
    )
    assert w == Window(
        T0, {"cursor": 7}, Collapsed(2, T0 + 15 * MIN, T0 + 30 * MIN + timedelta(microseconds=1))
    )
    assert not w.first_run and w.previous_slot is not None and w.previous_slot.tzinfo is UTC
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.previous_slot = None  # type: ignore[misc]


def test_what_cannot_be_read_is_left_out_rather_than_failing_the_attempt() -> None:
    w = window_of({"previous_slot": "yesterday", "collapsed": "2", "collapsed_first": 3, "other": 1})
    assert w == Window(None, None, None)
    assert window_of({"previous_slot": "2026-11-02T10:00:00"}).previous_slot is None  # no offset


# ---------------------------------------------------------------------------------------------------
# Spread


def test_the_offset_is_a_stable_hash_of_the_name_within_the_spread() -> None:
    spread = 30 * SEC
    # Pinned: the same on every ticker, every restart and every version.
    assert spread_offset("nightly-report", spread) == timedelta(seconds=9, milliseconds=143)
    assert spread_offset("herd-a", spread) == timedelta(seconds=26, milliseconds=94)
    assert spread_offset("herd-b", spread) == timedelta(milliseconds=895)
    offsets = [spread_offset(f"herd-{i}", spread) for i in range(1000)]
    assert all(timedelta(0) <= o < spread and o % timedelta(milliseconds=1) == timedelta(0) for o in offsets)
    # a top-of-the-hour herd is spread over the whole of it: each tenth of it holds about a tenth
    tenths = [sum(1 for o in offsets if i * 3 * SEC <= o < (i + 1) * 3 * SEC) for i in range(10)]
    assert min(tenths) > 60 and max(tenths) < 140, tenths
    assert spread_offset("herd-a", None) == timedelta(0)
    assert spread_offset("herd-a", timedelta(microseconds=999)) == timedelta(0)  # under a millisecond


def entry(**fields: Any) -> dict[str, Any]:
    return {"name": "s", "job": "noop", **fields}


def problems(**fields: Any) -> list[str]:
    spec, errs = parse_entry(entry(**fields), "schedule 's'")
    assert (spec is None) == bool(errs)
    return errs


def test_the_file_takes_a_spread_below_the_interval() -> None:
    spec, errs = parse_entry(entry(every="1m", spread="59s"), "schedule 's'")
    assert errs == [] and spec is not None and spec.spread == 59 * SEC
    assert spec.spread_offset() == spread_offset("s", 59 * SEC)
    spec, _ = parse_entry(entry(every="1m", spread="0s"), "schedule 's'")
    assert spec is not None and spec.spread is None and spec.spread_offset() == timedelta(0)
    spec, _ = parse_entry(entry(cron="0 * * * *", spread="10m"), "schedule 's'")
    assert spec is not None and spec.spread == 10 * MIN  # a cron's bound is checked by apply
    assert problems(every="1m") == [] and parse_entry(entry(every="1m"), "x")[0].spread is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"every": "1m", "spread": "1m"},
            "schedule 's': spread: must be less than the interval ('1m'), got '1m'",
        ),
        (
            {"every": "1m", "spread": 90},
            "schedule 's': spread: must be less than the interval ('1m'), got 90",
        ),
        ({"every": "1m", "spread": "-5s"}, "schedule 's': spread: must not be negative ('-5s')"),
        ({"every": "1m", "spread": "soon"}, "schedule 's': spread: invalid duration 'soon'"),
        ({"every": "1m", "spread": True}, "schedule 's': spread: expected a duration"),
        ({"every": "1h", "spread": "3661d"}, "schedule 's': spread: at most 3660 days, got '3661d'"),
    ],
)
def test_a_bad_spread_is_one_line_naming_the_field(fields: dict[str, Any], line: str) -> None:
    (got,) = problems(**fields)
    assert got.startswith(line), got


# ---------------------------------------------------------------------------------------------------
# Lateness from the spread start, and the slots folded into a run


def test_lateness_counts_from_the_slot_plus_the_offset() -> None:
    # A ticker back 70 s after the 10:00 slot: late by 10 s past the default grace (60 s) from the
    # slot, but on time from its start 17 s later.
    now = T0 + 70 * SEC
    plain = plan_slots(Timing(every=15 * MIN), "skip", T0, now, grace=None, max_lateness=None, limit=100)
    assert plain.run == [] and plain.missed == 1
    spread = plan_slots(
        Timing(every=15 * MIN), "skip", T0, now, grace=None, max_lateness=None, limit=100, offset=17 * SEC
    )
    assert spread.run == [T0] and spread.missed == 0
    late = plan_slots(
        QUARTER, "all", T0, T0 + 2 * MIN, grace=None, max_lateness=MIN, limit=100, offset=50 * SEC
    )
    assert late.skipped == [(T0, "max_lateness: 0:01:10 late (limit 0:01:00)")]


def test_latest_folds_the_missed_slots_into_the_run_it_keeps() -> None:
    # The example of the design: outage 10:02-10:52, missed 10:15, 10:30, 10:45: one run, 10:45,
    # standing for 10:15 and 10:30.
    p = plan_slots(QUARTER, "latest", T0 + 15 * MIN, T0 + 52 * MIN, grace=None, max_lateness=None, limit=100)
    assert p.run == [T0 + 45 * MIN]
    assert p.collapsed == Collapsed(2, T0 + 15 * MIN, T0 + 30 * MIN)
    # Back at 11:00:30: 11:00 is on time and stands for all three.
    p = plan_slots(
        QUARTER, "latest", T0 + 15 * MIN, T0 + 60 * MIN + 30 * SEC, grace=None, max_lateness=None, limit=100
    )
    assert p.run == [T0 + 60 * MIN] and p.collapsed == Collapsed(3, T0 + 15 * MIN, T0 + 45 * MIN)
    # Nothing missed: nothing folded.
    p = plan_slots(QUARTER, "latest", T0, T0 + 10 * SEC, grace=None, max_lateness=None, limit=100)
    assert p.run == [T0] and p.collapsed is None


def test_all_folds_only_what_max_catchup_dropped_and_skip_folds_nothing() -> None:
    now = T0 + 60 * MIN + 30 * SEC  # 10:00 to 11:00: five slots due
    p = plan_slots(QUARTER, "all", T0, now, grace=None, max_lateness=None, limit=100, max_catchup=2)
    assert p.run == [T0 + 45 * MIN, T0 + 60 * MIN] and p.collapsed == Collapsed(3, T0, T0 + 30 * MIN)
    p = plan_slots(QUARTER, "all", T0, now, grace=None, max_lateness=None, limit=100)
    assert len(p.run) == 5 and p.collapsed is None
    p = plan_slots(QUARTER, "skip", T0, now, grace=None, max_lateness=None, limit=100)
    assert p.run == [T0 + 60 * MIN] and p.missed == 4 and p.collapsed is None


def test_a_long_outage_of_a_cron_schedule_is_counted_up_to_the_limit() -> None:
    minutely = Timing(cron="* * * * *")
    p = plan_slots(minutely, "latest", T0, T0 + timedelta(days=30), grace=None, max_lateness=None, limit=100)
    (kept,) = p.run
    assert p.collapsed is not None and p.collapsed.first == T0 and p.collapsed.last == kept - MIN
    assert p.collapsed.count == p.missed == 10_000  # counted as the policy counts missed slots: capped
    every = plan_slots(
        Timing(every=MIN), "latest", T0, T0 + timedelta(days=30), grace=None, max_lateness=None, limit=100
    )
    assert every.collapsed is not None and every.collapsed.count == 30 * 24 * 60  # exact


def test_stale_runs_settle_from_their_start_and_the_kept_one_stands_for_the_others() -> None:
    offset = 20 * SEC
    stale = [
        StaleRun(T0 + i * MIN, T0 + i * MIN + offset + 30 * SEC, T0 + i * MIN + offset) for i in range(3)
    ]
    now = T0 + 3 * MIN
    decided = settle_stale("latest", stale, 0, now, max_lateness=None, max_catchup=None)
    assert decided[2] is None
    assert decided[0] == "catchup latest: not started within its grace (30s); a newer slot runs instead"
    assert settled_collapsed("latest", stale, decided) == Collapsed(2, T0, T0 + MIN)
    assert (
        settled_collapsed(
            "skip", stale, settle_stale("skip", stale, 0, now, max_lateness=None, max_catchup=None)
        )
        is None
    )
    # max_lateness counts from the run's start too: 10:02:20 is 40 s late at 10:03
    decided = settle_stale("latest", stale, 0, now, max_lateness=45 * SEC, max_catchup=None)
    assert decided[2] is None
    decided = settle_stale("latest", stale, 0, now, max_lateness=35 * SEC, max_catchup=None)
    assert decided[2] == "max_lateness: 0:00:40 late (limit 0:00:35)"
    assert settled_collapsed("latest", stale, decided) is None  # nothing kept


def test_a_command_job_reads_its_window_from_the_environment(tmp_path: Any) -> None:
    from fleet.jobs import JobContext
    from fleet.process.command_jobs import CommandJob

    out = tmp_path / "window.txt"
    job = CommandJob(
        "report",
        ("/bin/sh", "-c", f'printf "%s\\n%s" "$FLEET_PREVIOUS_SLOT" "$FLEET_WINDOW" > {out}'),
        {},
        frozenset(),
        None,
        5.0,
    )
    window = Window(T0, {"cursor": 7}, Collapsed(2, T0 + 15 * MIN, T0 + 30 * MIN))
    job(JobContext("q", T0 + 45 * MIN, 1, {}, "w", "report", window=window))
    previous, whole = out.read_text().splitlines()
    assert previous == "2026-11-02T10:00:00Z"
    assert orjson.loads(whole) == {
        "previous_slot": "2026-11-02T10:00:00Z",
        "previous_result": {"cursor": 7},
        "collapsed": {"count": 2, "first": "2026-11-02T10:15:00Z", "last": "2026-11-02T10:30:00Z"},
    }
    job(JobContext("q", T0, 1, {}, "w", "report"))  # the first run ever
    previous, whole = out.read_text().split("\n")
    assert previous == "" and orjson.loads(whole) == {
        "previous_slot": None,
        "previous_result": None,
        "collapsed": None,
    }


def test_a_schedule_declared_in_code_takes_a_spread_as_the_file_does() -> None:
    import fleet

    spec = fleet.Every("15m", name="sync", job="crm.sync", spread=timedelta(seconds=90)).spec()
    assert spec.spread == 90 * SEC and spec.spread_offset() == spread_offset("sync", 90 * SEC)
    bad = fleet.Every("1m", name="sync2", job="crm.sync", spread="2m")
    _, errs = bad.check()
    assert len(errs) == 1 and errs[0].endswith(
        "schedule 'sync2': spread: must be less than the interval ('1m'), got '2m'"
    )
