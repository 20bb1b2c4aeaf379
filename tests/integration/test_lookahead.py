"""Slots created ahead of their time (the ticker's lookahead) on a real database: not claimable
early, and pause, resume, apply, prune, catch-up, missed slots, triggers, backfills and racing
tickers as they are without it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.admin.repair import run_trigger, schedule_pause, schedule_resume
from fleet.ops.repair_commands import slot_backfill
from fleet.store.db import connect
from fleet.store.queries import q
from fleet.ticker import settle
from fleet.ticker.tick import TickResult, run_once
from fleet.worker.claim import run_claim
from tests.support import apply_text, scalar

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
AHEAD = timedelta(minutes=5)


def minutely_text(name: str = "s", **extra: str) -> str:
    """A schedule every minute from T0 (catch-up 'all', overlap 'allow', unless told)."""
    fields = {"catchup": '"all"', "overlap": '"allow"', "args": "{ v = 1 }", **extra}
    more = "".join(f"{k} = {v}\n" for k, v in fields.items())
    return f'[[schedule]]\nname = "{name}"\nevery = "1m"\njob = "noop"\nstart_at = "2026-11-02T10:00:00Z"\n{more}'


def minutely(
    conn: psycopg.Connection[Any], name: str = "s", now: datetime = T0 - 10 * MIN, **extra: str
) -> None:
    apply_text(conn, minutely_text(name, **extra), now=now)


def tick(conn: psycopg.Connection[Any], now: datetime, lookahead: timedelta = AHEAD, **kw: Any) -> TickResult:
    """One tick as the ticker's loop runs it: the slots, then the runs created ahead."""
    opts = {"batch_size": 100, "catchup_limit": 1000, **kw}
    result = run_once(conn, lookahead=lookahead, now=now, **opts)
    settle.run_once(conn, now=now)
    return result


def runs(conn: psycopg.Connection[Any], name: str = "s") -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT scheduled_for, status::text AS status, run_after, origin, args, xmin::text AS xmin "
            "FROM fleet.job_runs WHERE schedule_name = %s ORDER BY scheduled_for",
            (name,),
        )
    ]


def slots(conn: psycopg.Connection[Any], name: str = "s") -> list[datetime]:
    return [r["scheduled_for"] for r in runs(conn, name)]


def next_run_at(conn: psycopg.Connection[Any], name: str = "s") -> datetime:
    return scalar(conn, "SELECT next_run_at FROM fleet.schedules WHERE name = %s", (name,))  # type: ignore[no-any-return]


def claim(conn: psycopg.Connection[Any], now: datetime) -> list[datetime]:
    attempts, _ = run_claim(conn, worker_id="w", jobs=["noop"], limit=100, lease_s=3600, now=now)
    return sorted(a.slot for a in attempts)


def minutes(*ks: int) -> list[datetime]:
    return [T0 + k * MIN for k in ks]


# -- creation ahead ------------------------------------------------------------------------------


def test_slots_within_the_lookahead_are_created_ahead_and_claimable_only_at_their_time(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn)
    r = tick(conn, T0 - 2 * MIN)
    assert r.created == 4 and not r.still_due and r.missed == 0
    rows = runs(conn)
    assert [x["scheduled_for"] for x in rows] == minutes(0, 1, 2, 3)
    assert all(x["status"] == "pending" and x["run_after"] == x["scheduled_for"] for x in rows)
    assert next_run_at(conn) == T0 + 4 * MIN  # the first slot not created yet
    assert tick(conn, T0 - 2 * MIN).schedules == 0  # nothing enters the horizon before T0 - 1m

    assert claim(conn, T0 - timedelta(milliseconds=1)) == []  # not a moment early
    assert claim(conn, T0) == [T0]
    assert claim(conn, T0 + MIN - timedelta(milliseconds=1)) == []
    assert claim(conn, T0 + MIN + SEC) == [T0 + MIN]

    # The horizon moves with the clock: one slot more each minute.
    assert tick(conn, T0 - MIN).created == 1
    assert slots(conn)[-1] == T0 + 4 * MIN


def test_a_burst_of_slots_due_at_one_moment_is_created_before_it(conn: psycopg.Connection[Any]) -> None:
    text = "".join(f'[[schedule]]\nname = "h{i:02}"\ncron = "0 * * * *"\njob = "noop"\n' for i in range(40))
    apply_text(conn, text, now=T0 - 30 * MIN)
    hour = T0
    ticks = 0
    while tick(conn, hour - 45 * SEC, lookahead=MIN, batch_size=7).created:
        ticks += 1
    assert ticks == 6  # 40 schedules, 7 per batch
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE scheduled_for = %s", (hour,)) == 40
    # When the hour comes, there is nothing left for the ticker to do.
    r = tick(conn, hour, lookahead=MIN)
    assert r.schedules == 0 and r.created == 0
    assert len(claim(conn, hour)) == 40


def test_lookahead_zero_creates_slots_only_when_due(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    zero = timedelta(0)
    assert tick(conn, T0 - 30 * SEC, lookahead=zero).schedules == 0
    r = tick(conn, T0 + 5 * SEC, lookahead=zero)
    assert r.created == 1 and slots(conn) == [T0] and next_run_at(conn) == T0 + MIN

    wait = conn.execute(
        q("schedule_next_wait"), {"now": T0 + 5 * SEC, "lookahead": zero, "margin": zero}
    ).fetchone()
    assert wait is not None and wait["wait_s"] == 55.0
    wait = conn.execute(
        q("schedule_next_wait"), {"now": T0 + 5 * SEC, "lookahead": 30 * SEC, "margin": zero}
    ).fetchone()
    assert wait is not None and wait["wait_s"] == 25.0  # the ticker wakes when the slot enters the horizon


def test_the_catchup_limit_bounds_slots_ahead_too(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1s"\njob = "noop"\nstart_at = "2026-11-02T10:00:00Z"\n',
        now=T0 - MIN,
    )
    r = tick(conn, T0 - MIN, lookahead=2 * MIN, catchup_limit=50)
    assert r.created == 50 and r.still_due
    while tick(conn, T0 - MIN, lookahead=2 * MIN, catchup_limit=50).created:
        pass
    # T0 .. T0 + 60 s: the slots within the horizon, each once
    assert slots(conn) == [T0 + k * SEC for k in range(61)]


# -- catch-up and missed slots -------------------------------------------------------------------


def test_a_ticker_outage_shorter_than_the_lookahead_misses_nothing(conn: psycopg.Connection[Any]) -> None:
    minutely(conn, catchup='"skip"')
    tick(conn, T0 - MIN)  # up to T0 + 4m
    assert slots(conn) == minutes(0, 1, 2, 3, 4)
    # The ticker is away; the workers start each run at its time.
    for k in range(4):
        assert claim(conn, T0 + k * MIN + SEC) == minutes(k)
    r = tick(conn, T0 + 4 * MIN)  # back 5 minutes later: nothing came due uncreated
    assert r.missed == 0 and r.created == 5
    assert slots(conn) == minutes(*range(10))
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules") == 0
    assert [r["status"] for r in runs(conn)] == ["running"] * 4 + ["pending"] * 6


@pytest.mark.parametrize(
    ("policy", "caught_up", "missed"),
    [("skip", [], 2), ("latest", [45], 1), ("all", [15, 30, 45], 0)],
)
def test_an_outage_longer_than_the_lookahead_goes_through_the_catchup_policy(
    conn: psycopg.Connection[Any], policy: str, caught_up: list[int], missed: int
) -> None:
    # A 15-minute job and a 10-minute lookahead; the last ticks before the outage (of tickers and
    # workers alike) ran at 10:02 and 10:06 (which created 10:15 ahead), the ticker is back at
    # 10:52: 10:15, 10:30 and 10:45 were missed, the one created ahead as much as the others.
    apply_text(
        conn,
        f'[[schedule]]\nname = "s"\nevery = "15m"\njob = "noop"\nstart_at = "2026-11-02T10:15:00Z"\n'
        f'catchup = "{policy}"\noverlap = "allow"\n',
        now=T0 + 2 * MIN,
    )
    ahead = 10 * MIN
    assert tick(conn, T0 + 2 * MIN, lookahead=ahead).created == 0
    assert tick(conn, T0 + 6 * MIN, lookahead=ahead).created == 1
    r = tick(conn, T0 + 52 * MIN, lookahead=ahead)
    # The policy settles them all (the run created ahead as a missed slot: recorded skipped, not
    # run late, unless the policy runs it), and 11:00 is created ahead.
    assert r.missed == missed
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules") == missed
    assert next_run_at(conn) == T0 + 75 * MIN
    statuses = {row["scheduled_for"]: row["status"] for row in runs(conn)}
    assert statuses[T0 + 15 * MIN] == ("pending" if 15 in caught_up else "skipped")
    assert claim(conn, T0 + 52 * MIN) == minutes(*caught_up)
    reason = scalar(conn, "SELECT last_error FROM fleet.job_runs WHERE scheduled_for = %s", (T0 + 15 * MIN,))
    if 15 not in caught_up:
        assert reason is not None and reason.startswith(
            f"catchup {policy}: not started within its grace (1m)"
        )


# -- pause and resume ----------------------------------------------------------------------------


def test_pause_removes_runs_not_due_yet_and_resume_plans_from_now(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    tick(conn, T0 + 10 * SEC)  # T0 due, T0+1m .. T0+5m ahead
    assert slots(conn) == minutes(0, 1, 2, 3, 4, 5)
    trigger = run_trigger(conn, "s", now=T0 + 15 * SEC)  # an operator's run beside them

    assert schedule_pause(conn, "s", now=T0 + 20 * SEC) is True
    # The run already due stays (and runs); those not due yet are gone; the cursor goes back.
    assert slots(conn) == [T0, trigger.slot]
    assert next_run_at(conn) == T0 + MIN
    assert schedule_pause(conn, "s", now=T0 + 25 * SEC) is False
    assert slots(conn) == [T0, trigger.slot] and next_run_at(conn) == T0 + MIN

    assert tick(conn, T0 + 3 * MIN).schedules == 0  # paused: nothing created
    assert claim(conn, T0 + 30 * SEC) == sorted([T0, trigger.slot])
    assert claim(conn, T0 + 9 * MIN) == []  # no run starts while paused

    nxt = schedule_resume(conn, "s", now=T0 + 10 * MIN + 5 * SEC)
    assert nxt == T0 + 11 * MIN and next_run_at(conn) == T0 + 11 * MIN
    tick(conn, T0 + 10 * MIN + 5 * SEC)
    # The paused stretch is not caught up; the slots ahead are created again from the next slot.
    assert slots(conn) == [T0, trigger.slot, *minutes(11, 12, 13, 14, 15)]
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules") == 0


# -- apply ---------------------------------------------------------------------------------------


def test_apply_of_new_args_recreates_the_runs_not_due_yet(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    tick(conn, T0 + 10 * SEC)
    before = runs(conn)
    assert [r["args"] for r in before] == [{"v": 1}] * 6

    # A change that no run carries (the timeout is read at claim) leaves them alone.
    minutely(conn, now=T0 + 15 * SEC, timeout='"5m"')
    assert runs(conn) == before and next_run_at(conn) == T0 + 6 * MIN

    minutely(conn, now=T0 + 20 * SEC, args="{ v = 2 }", timeout='"5m"')
    assert slots(conn) == [T0] and next_run_at(conn) == T0 + MIN
    assert runs(conn)[0] == before[0]  # due: untouched
    tick(conn, T0 + 20 * SEC)
    after = runs(conn)
    assert [r["scheduled_for"] for r in after] == minutes(0, 1, 2, 3, 4, 5)
    assert [r["args"] for r in after] == [{"v": 1}] + [{"v": 2}] * 5


def test_apply_of_a_new_timing_replaces_the_runs_not_due_yet(conn: psycopg.Connection[Any]) -> None:
    minutely(conn)
    tick(conn, T0 + 10 * SEC)
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "2m"\njob = "noop"\ncatchup = "all"\nargs = { v = 1 }\n',
        now=T0 + 20 * SEC,
    )
    assert slots(conn) == [T0]  # the due run stays
    assert next_run_at(conn) == T0 + 2 * MIN  # the new timing's next slot
    tick(conn, T0 + 20 * SEC)
    assert slots(conn) == minutes(0, 2, 4)
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules") == 0


def test_prune_removes_the_runs_not_due_yet_of_the_schedules_it_disables(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn, "a")
    minutely(conn, "b")
    tick(conn, T0 + 10 * SEC)
    assert slots(conn, "a") == slots(conn, "b") == minutes(0, 1, 2, 3, 4, 5)
    apply_text(conn, minutely_text("a"), prune=True, now=T0 + 20 * SEC)
    assert slots(conn, "a") == minutes(0, 1, 2, 3, 4, 5)  # unchanged: untouched
    assert slots(conn, "b") == [T0]  # due: stays
    tick(conn, T0 + 2 * MIN)
    assert slots(conn, "b") == [T0]
    assert claim(conn, T0 + 2 * MIN) == sorted([*minutes(0, 1, 2), T0])


# -- triggers and backfills ----------------------------------------------------------------------


def test_triggers_and_backfills_beside_runs_created_ahead(conn: psycopg.Connection[Any]) -> None:
    minutely(conn, now=T0 - 10 * MIN)
    tick(conn, T0 + 10 * SEC)
    t = run_trigger(conn, "s", now=T0 + 30 * SEC, args={"v": 9})
    assert t.created and t.slot == T0 + 30 * SEC
    # A trigger on a slot's own second finds the run of that slot (created ahead) and adds none.
    assert run_trigger(conn, "s", now=T0 + MIN + timedelta(milliseconds=300)).created is False
    b = slot_backfill(conn, "s", T0 - 3 * MIN, T0 + 40 * SEC, now=T0 + 40 * SEC)
    assert b.created == minutes(-3, -2, -1) and b.existing == 1
    by_slot = {r["scheduled_for"]: r for r in runs(conn)}
    assert by_slot[t.slot]["origin"] == "trigger" and by_slot[t.slot]["args"] == {"v": 9}
    assert {by_slot[s]["origin"] for s in minutes(1, 2, 3, 4, 5)} == {"schedule"}
    assert claim(conn, T0 + 45 * SEC) == sorted([*minutes(-3, -2, -1, 0), t.slot])
    tick(conn, T0 + MIN)
    assert slots(conn)[-1] == T0 + 6 * MIN


# -- tickers racing ------------------------------------------------------------------------------


def test_two_tickers_racing_create_each_slot_once(db_url: str, conn: psycopg.Connection[Any]) -> None:
    text = "".join(
        f'[[schedule]]\nname = "r{i:02}"\nevery = "1s"\njob = "noop"\nstart_at = "2026-11-02T10:00:00Z"\n'
        for i in range(20)
    )
    apply_text(conn, text, now=T0 - MIN)
    created = [0, 0]
    errors: list[BaseException] = []
    # Both tick at the same instants (they share the database's clock), each until nothing is due.
    step = threading.Barrier(2, timeout=60)

    def ticker(i: int) -> None:
        try:
            with connect(db_url, f"t{i}") as c:
                for s in range(0, 21):
                    step.wait()
                    while True:
                        r = run_once(c, batch_size=3, catchup_limit=7, lookahead=30 * SEC, now=T0 + s * SEC)
                        created[i] += r.created
                        if not r.still_due:
                            break
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
            step.abort()

    threads = [threading.Thread(target=ticker, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    # Every slot of T0 .. T0 + 50 s of every schedule, once, and none missed.
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 20 * 51 == sum(created)
    assert scalar(conn, "SELECT count(DISTINCT scheduled_for) FROM fleet.job_runs") == 51
    assert scalar(conn, "SELECT sum(missed_slots) FROM fleet.schedules") == 0
    assert scalar(conn, "SELECT min(next_run_at) FROM fleet.schedules") == T0 + 51 * SEC


# -- the worker's sleep --------------------------------------------------------------------------


def test_a_worker_sleeps_until_the_next_run_comes_due_past_a_queued_run(
    conn: psycopg.Connection[Any],
) -> None:
    minutely(conn, overlap='"queue"')
    tick(conn, T0 + 10 * SEC)
    assert claim(conn, T0 + 10 * SEC) == [T0]
    # At T0 + 70 s the run of T0 + 1m is due but queued behind T0's: it must not hide the next run
    # to come due (T0 + 2m), or an idle worker would sleep through it until its poll.
    assert claim(conn, T0 + 70 * SEC) == []
    row = conn.execute(q("run_next_wait"), {"jobs": ["noop"], "now": T0 + 70 * SEC}).fetchone()
    assert row is not None and row["wait_s"] == 50.0


def test_runs_created_ahead_are_listed_only_when_pending_runs_are_asked_for(
    conn: psycopg.Connection[Any],
) -> None:
    from fleet.health.reading import run_list

    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1m"\njob = "noop"\n')
    conn.execute(
        "UPDATE fleet.schedules SET next_run_at = date_trunc('minute', now()) - interval '2 minutes'"
    )
    tick(conn, now=None, lookahead=AHEAD)  # type: ignore[arg-type]
    conn.execute("UPDATE fleet.job_runs SET status = 'done' WHERE scheduled_for <= now()")
    ahead = scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE scheduled_for > now()")
    assert ahead >= 4
    listed = run_list(conn, "s", limit=100)
    assert listed and all(r.status == "done" for r in listed)  # the history, not the future
    assert len(run_list(conn, "s", status="pending", limit=100)) == ahead
