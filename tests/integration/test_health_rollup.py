"""The health roll-up: schedule_stats kept by the tickers, and reads exact before, during and after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.admin import repair
from fleet.health import rollup
from fleet.health.results import ScheduleHealth
from fleet.ops.status import schedule_health
from fleet.store import chores
from fleet.store.db import connect
from fleet.store.queries import q
from fleet.timing.schedule import nominal_interval, timing_of
from tests.integration.ops_support import add_run
from tests.support import apply_text, live_ticker, scalar

CHORE = rollup.rollup_chore(2.0)
H = timedelta(hours=1)
SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)


def roll(conn: psycopg.Connection[Any]) -> int:
    """Run the roll-up now, step after step until it has nothing more to do; returns the steps."""
    chores.register(conn, [CHORE])
    conn.execute("UPDATE fleet.chores SET due_at = '2000-01-01T00:00Z' WHERE name = %s", (rollup.CHORE,))
    steps = 0
    while chores.run_due(conn, [CHORE]):
        steps += 1
        assert steps < 100
    return steps


def last(h: ScheduleHealth) -> tuple[Any, ...]:
    return (h.last_success_at, h.last_run_at, h.last_outcome, h.last_error, h.dead_runs)


def probed(conn: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    """Each schedule's newest runs as the per-schedule probes find them (no roll-up yet)."""
    with conn.transaction(force_rollback=True):
        conn.execute("DELETE FROM fleet.chores")
        return {h.name: last(h) for h in schedule_health(conn)}


def read(conn: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    return {h.name: last(h) for h in schedule_health(conn)}


def stats(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    row: dict[str, Any] | None = conn.execute(
        "SELECT * FROM fleet.schedule_stats WHERE name = %s", (name,)
    ).fetchone()
    return row


def three(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, "".join(f'[[schedule]]\nname = "{n}"\nevery = "1h"\njob = "noop"\n' for n in "abc"))
    add_run(conn, "a", SLOT, "done")
    add_run(conn, "a", SLOT + H, "dead", attempts=3, error="boom")
    add_run(conn, "b", SLOT, "done")
    add_run(conn, "b", SLOT + H, "skipped")
    # c has no runs at all


def test_reads_are_exact_before_during_and_after_the_first_pass(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    three(conn)
    truth = probed(conn)
    assert truth["a"][1:] == (SLOT + H, "dead", "boom", 1) and truth["c"] == (None, None, None, None, 0)
    assert read(conn) == truth  # no roll-up yet: every schedule probed
    monkeypatch.setattr(rollup, "PROBE_BATCH", 2)
    chores.register(conn, [CHORE])
    assert chores.run_due(conn, [CHORE]) == [rollup.CHORE]
    chore = conn.execute("SELECT mark, cursor FROM fleet.chores WHERE name = %s", (rollup.CHORE,)).fetchone()
    assert chore is not None and chore["cursor"] == "b" and chore["mark"] is not None
    assert stats(conn, "a") is not None and stats(conn, "c") is None
    assert read(conn) == truth  # a, b from the stats; c still probed
    roll(conn)
    chore = conn.execute("SELECT mark, cursor FROM fleet.chores WHERE name = %s", (rollup.CHORE,)).fetchone()
    assert chore is not None and chore["cursor"] is None
    assert read(conn) == truth
    a = stats(conn, "a")
    assert a is not None and (a["last_success_slot"], a["last_slot"], a["last_status"]) == (
        SLOT,
        SLOT + H,
        "dead",
    )
    assert stats(conn, "c") is None  # nothing finished: no row


def test_runs_finished_after_the_mark_are_read_at_once_and_merged_later(
    conn: psycopg.Connection[Any],
) -> None:
    three(conn)
    roll(conn)
    mark = scalar(conn, "SELECT mark FROM fleet.chores WHERE name = %s", (rollup.CHORE,))
    # just after the mark, and one whose transaction started before the mark but committed after it
    add_run(conn, "b", SLOT + 2 * H, "done", finished="now()")
    add_run(conn, "c", SLOT, "done", finished=f"'{(mark - timedelta(seconds=10)).isoformat()}'")
    truth = probed(conn)
    assert truth["b"][0] is not None and truth["c"][1] == SLOT
    assert read(conn) == truth  # exact before the roll-up sees them
    roll(conn)
    assert read(conn) == truth
    b, c = stats(conn, "b"), stats(conn, "c")
    assert b is not None and b["last_slot"] == SLOT + 2 * H and b["last_status"] == "done"
    assert c is not None and c["last_success_slot"] == SLOT
    # an older slot finishing later (a backfill) does not replace the newest slot
    add_run(conn, "b", SLOT - H, "dead", finished="now()")
    roll(conn)
    b = stats(conn, "b")
    assert b is not None and b["last_slot"] == SLOT + 2 * H
    assert read(conn) == probed(conn)

    # each step reads back over its margin: what is not newer is not written again, nor locked
    # (a lock sets the row's xmax)
    def versions() -> dict[str, tuple[str, str]]:
        rows = conn.execute("SELECT name, xmin::text, xmax::text FROM fleet.schedule_stats")
        return {r["name"]: (r["xmin"], r["xmax"]) for r in rows}

    before = versions()
    roll(conn)
    assert versions() == before


def test_the_merge_waits_while_runs_wait_for_a_worker(conn: psycopg.Connection[Any]) -> None:
    """A run due and not claimed yet (a herd, a backlog) puts the merge off, up to MERGE_DEFER_S
    after the last one; reads stay exact meanwhile, and the merge comes once nothing waits."""
    three(conn)
    roll(conn)

    def mark() -> datetime:
        got: datetime = scalar(conn, "SELECT mark FROM fleet.chores WHERE name = %s", (rollup.CHORE,))
        return got

    merged = mark()
    add_run(conn, "b", SLOT + 2 * H, "done", finished="now()")
    add_run(conn, "c", SLOT + 2 * H, "pending", attempts=0)  # due, waiting for a worker
    roll(conn)
    b = stats(conn, "b")
    assert b is not None and b["last_slot"] == SLOT + H  # not merged yet
    assert mark() == merged
    assert read(conn) == probed(conn)  # exact all the same
    # the wait is bounded: a mark older than MERGE_DEFER_S merges whatever waits
    conn.execute(
        "UPDATE fleet.chores SET mark = mark - make_interval(secs => %s) WHERE name = %s",
        (rollup.MERGE_DEFER_S, rollup.CHORE),
    )
    roll(conn)
    b = stats(conn, "b")
    assert b is not None and b["last_slot"] == SLOT + 2 * H and mark() > merged
    # and once nothing waits, the next step merges at once
    add_run(conn, "a", SLOT + 3 * H, "done", finished="now()")
    roll(conn)
    a = stats(conn, "a")
    assert a is not None and a["last_slot"] == SLOT + H
    conn.execute("UPDATE fleet.job_runs SET status = 'running', attempts = 1 WHERE schedule_name = 'c'")
    roll(conn)
    a = stats(conn, "a")
    assert a is not None and a["last_slot"] == SLOT + 3 * H
    assert read(conn) == probed(conn)


def test_a_retried_or_discarded_dead_run_is_exact_at_once(conn: psycopg.Connection[Any]) -> None:
    three(conn)
    roll(conn)
    assert read(conn)["a"][1:3] == (SLOT + H, "dead")
    repair.run_discard(conn, "a", SLOT + H)
    assert read(conn) == probed(conn)
    assert read(conn)["a"][1:] == (
        SLOT + H,
        "discarded",
        "discarded by an operator; the run was dead: boom",
        0,
    )
    roll(conn)
    a = stats(conn, "a")
    assert a is not None and a["dirty"] == 0 and a["last_outcome"] == "discarded"
    repair.run_retry(conn, "a", SLOT + H)  # pending again: the newest finished run is the older one
    assert read(conn)["a"][1:3] == (SLOT, "done")
    assert read(conn) == probed(conn)
    roll(conn)
    a = stats(conn, "a")
    assert a is not None and a["dirty"] == 0 and a["last_slot"] == SLOT
    assert read(conn) == probed(conn)
    # it dies again: merged as the newest
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'dead', finished_at = now() WHERE schedule_name = 'a' AND scheduled_for = %s",
        (SLOT + H,),
    )
    roll(conn)
    assert read(conn)["a"][1:3] == (SLOT + H, "dead") and read(conn) == probed(conn)


def test_the_last_success_outlives_its_run_and_a_deleted_schedule_its_stats(
    conn: psycopg.Connection[Any],
) -> None:
    three(conn)
    roll(conn)
    before = read(conn)["b"]
    conn.execute("DELETE FROM fleet.job_runs WHERE schedule_name = 'b'")  # pruned
    assert probed(conn)["b"] == (None, None, None, None, 0)
    assert read(conn)["b"] == before
    roll(conn)
    assert read(conn)["b"] == before
    apply_text(conn, '[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n', prune=True)
    conn.execute("DELETE FROM fleet.schedules WHERE name = 'b'")
    assert stats(conn, "b") is None and stats(conn, "a") is not None


def test_two_tickers_roll_up_once(conn: psycopg.Connection[Any], db_url: str) -> None:
    three(conn)
    chores.register(conn, [CHORE])
    with connect(db_url, "other-ticker") as other:
        with other.transaction():
            held = other.execute("SELECT * FROM fleet.chores WHERE name = %s FOR UPDATE", (rollup.CHORE,))
            assert held.fetchone() is not None
            assert chores.run_due(conn, [CHORE]) == []  # held by the other ticker: skipped
        assert chores.run_due(other, [CHORE]) == [rollup.CHORE]
        assert chores.run_due(conn, [CHORE]) == []  # done, not due again for 2 s
    assert scalar(conn, "SELECT steps FROM fleet.chores WHERE name = %s", (rollup.CHORE,)) == 1


def test_runs_created_ahead_of_their_time_are_waiting_not_pending(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1m"\njob = "unserved.job"\n')
    now = scalar(conn, "SELECT now()")
    ahead = now + timedelta(seconds=40)
    live_ticker(conn, at=ahead + timedelta(seconds=90))
    add_run(
        conn,
        "s",
        ahead,
        "pending",
        job="unserved.job",
        attempts=0,
        run_after=f"'{ahead.isoformat()}'::timestamptz",
    )
    (h,) = schedule_health(conn, now=now)
    assert (h.pending_runs, h.waiting_runs, h.unserved_runs, h.oldest_pending_age_s) == (0, 1, 0, None)
    assert h.next_run_at == ahead and "NO-WORKER" not in h.problems and "BACKLOG" not in h.problems
    later = ahead + timedelta(seconds=90)  # now due, and waiting longer than its interval
    (h,) = schedule_health(conn, now=later)
    assert (h.pending_runs, h.waiting_runs, h.unserved_runs) == (1, 0, 1)
    assert h.verdict == "NO-WORKER" and "BACKLOG" in h.problems and h.oldest_pending_age_s == 90.0
    # a retry waiting out its back-off is waiting too, but not the next slot
    conn.execute("UPDATE fleet.job_runs SET run_after = %s + interval '1 hour'", (later,))
    (h,) = schedule_health(conn, now=later)
    assert h.waiting_runs == 1 and h.next_run_at != ahead and h.verdict != "NO-WORKER"


def test_cron_cadence_is_stored_and_read_as_computed(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "weekdays"\ncron = "0 9 * * 1-5"\ntimezone = "Europe/Berlin"\njob = "noop"\n',
    )
    row = conn.execute("SELECT * FROM fleet.schedules").fetchone()
    assert row is not None
    friday_noon = datetime(2026, 3, 6, 12, tzinfo=UTC)
    assert rollup.cadence_refresh(conn, friday_noon) == 1
    assert rollup.cadence_refresh(conn, friday_noon) == 0  # covered now
    stored = conn.execute("SELECT cadence_from, cadence_mid, cadence_until FROM fleet.schedules").fetchone()
    assert stored is not None and stored["cadence_from"] < friday_noon < stored["cadence_mid"]
    for at in (friday_noon, datetime(2026, 3, 9, 8, 30, tzinfo=UTC), datetime(2026, 3, 10, 7, tzinfo=UTC)):
        (h,) = schedule_health(conn, now=at)
        assert h.interval_s == nominal_interval(timing_of(row), at).total_seconds()
    # the second window (Monday to Tuesday) is read from the database, no cron evaluated
    monday = datetime(2026, 3, 9, 10, tzinfo=UTC)
    interval = scalar(
        conn,
        "SELECT extract(epoch FROM cadence_until - cadence_mid)::float8 FROM fleet.schedules "
        "WHERE %s >= cadence_mid AND %s < cadence_until",
        (monday, monday),
    )
    assert interval == 24 * 3600
    # a changed timing makes the stored windows void
    apply_text(
        conn,
        '[[schedule]]\nname = "weekdays"\ncron = "0 9 * * *"\ntimezone = "Europe/Berlin"\njob = "noop"\n',
    )
    (h,) = schedule_health(conn, now=friday_noon)
    assert h.interval_s == 24 * 3600
    assert rollup.cadence_refresh(conn, friday_noon) == 1


def test_cron_cadence_windows_span_the_slots_of_equal_gaps(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "hourly"\ncron = "15 30 * * * *"\njob = "noop"\n'
        '[[schedule]]\nname = "daily"\ncron = "0 9 * * *"\ntimezone = "Europe/Berlin"\njob = "noop"\n',
    )
    rows = {r["name"]: r for r in conn.execute("SELECT * FROM fleet.schedules").fetchall()}
    at = datetime(2026, 3, 20, 12, tzinfo=UTC)
    assert rollup.cadence_refresh(conn, at, cache=rollup.CadenceCache()) == 2
    stored = {
        r["name"]: r
        for r in conn.execute(
            "SELECT name, cadence_from, cadence_gap, cadence_mid, cadence_until FROM fleet.schedules"
        )
    }
    # one stored window holds for a day of hourly slots, and for the daily one until the week
    # before the spring transition of 29 March, where its gap is 23 hours
    assert stored["hourly"]["cadence_mid"] - stored["hourly"]["cadence_from"] == 25 * H
    assert stored["daily"]["cadence_mid"] == datetime(2026, 3, 28, 8, tzinfo=UTC)
    assert stored["daily"]["cadence_until"] - stored["daily"]["cadence_mid"] == 23 * H
    # nothing to move on until the windows end
    assert rollup.cadence_refresh(conn, at + 20 * H, cache=rollup.CadenceCache()) == 0
    # what is read from them is the real gap around every instant they cover
    for name, row in rows.items():
        start, end = stored[name]["cadence_from"], stored[name]["cadence_until"]
        probes = [start + (end - start) * k / 97 for k in range(97)] + [stored[name]["cadence_mid"]]
        for probe in probes:
            # straight from the statement (a cadence it does not hold would be computed in Python)
            interval = scalar(
                conn,
                "SELECT interval_s FROM (" + q("schedule_health") + ") h",
                {
                    "now": probe,
                    "names": [name],
                    "every": False,
                    "served": [],
                    "since": None,
                    "done": True,
                    "cursor": "",
                },
            )
            assert interval == nominal_interval(timing_of(row), probe).total_seconds(), (name, probe)


def test_a_timing_is_evaluated_once_across_steps(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn, "".join(f'[[schedule]]\nname = "s{i}"\ncron = "7 * * * *"\njob = "noop"\n' for i in range(3))
    )
    cache = rollup.CadenceCache()
    at = datetime(2026, 3, 20, 12, tzinfo=UTC)
    assert rollup.cadence_refresh(conn, at, limit=1, cache=cache) == 1
    (first,) = cache.windows.values()
    assert rollup.cadence_refresh(conn, at, limit=1, cache=cache) == 1
    assert rollup.cadence_refresh(conn, at, limit=1, cache=cache) == 1
    assert rollup.cadence_refresh(conn, at, limit=1, cache=cache) == 0
    (again,) = cache.windows.values()
    assert again is first  # not evaluated again for the other two schedules
    windows = conn.execute(
        "SELECT DISTINCT cadence_from, cadence_gap, cadence_mid, cadence_until FROM fleet.schedules"
    )
    assert windows.fetchall() == [
        dict(zip(("cadence_from", "cadence_gap", "cadence_mid", "cadence_until"), first, strict=True))
    ]
    # a cache holds at most its size, the oldest timing going first
    small = rollup.CadenceCache(size=1)
    small.window(
        {
            "timing_hash": "a",
            "cron": "7 * * * *",
            "timezone": "UTC",
            "start_at": None,
            "dst_repeated": "first",
            "dst_missing": "shift",
        },
        at,
    )
    small.window(
        {
            "timing_hash": "b",
            "cron": "8 * * * *",
            "timezone": "UTC",
            "start_at": None,
            "dst_repeated": "first",
            "dst_missing": "shift",
        },
        at,
    )
    assert list(small.windows) == ["b"]


def test_stale_cadences_are_read_through_indexes(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        for name, params in (
            ("schedule_cadence_stale", {"now": None, "limit": 10}),
            (
                "schedule_cadence_set",
                {"now": None, "limit": 10, "hashes": [], "froms": [], "gaps": [], "mids": [], "untils": []},
            ),
        ):
            plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + q(name), params))
            assert "Seq Scan on schedules" not in plan, plan
            assert "schedules_cadence_expiry" in plan and "schedules_cadence_outdated" in plan, plan


def test_dirty_schedules_are_found_through_their_index(conn: psycopg.Connection[Any]) -> None:
    """A step looks for dirty stats rows without walking every schedule."""
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        params = {"dirty": True, "after": "", "limit": 10}
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + q("stats_probe"), params))
        assert "schedule_stats_dirty" in plan, plan
