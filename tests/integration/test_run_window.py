"""The run's window on a real database, through the ticker's and the worker's own code: the first
run ever, a run after downtime that `latest` collapsed slots into, the window kept for every attempt
of a slot whatever finished meanwhile, overlapping runs, runs created ahead that were settled, and
what a handler returns (stored, handed on, or refused when it cannot be stored)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.jobs import JobContext
from fleet.process.command_jobs import CommandJob
from fleet.process.settings import worker_settings
from fleet.ticker import settle
from fleet.ticker.tick import run_once as tick_once
from fleet.timing.window import Collapsed, Window
from fleet.worker.attempt import Attempt
from fleet.worker.claim import run_claim
from fleet.worker.finish import decide, run_finish
from fleet.worker.loop import Worker
from fleet.worker.previous import look_up
from tests.support import apply_text, scalar

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)


def quarterly(conn: psycopg.Connection[Any], **extra: str) -> None:
    more = "".join(f"{k} = {v}\n" for k, v in extra.items())
    apply_text(
        conn,
        '[[schedule]]\nname = "q"\nevery = "15m"\njob = "incremental"\nstart_at = "2026-11-02T10:00:00Z"\n'
        f"{more}",
        now=T0 - MIN,
    )


def tick(conn: psycopg.Connection[Any], now: datetime, lookahead: timedelta = timedelta(0)) -> None:
    tick_once(conn, batch_size=100, catchup_limit=1000, lookahead=lookahead, now=now)


class Seen:
    """What the handler of job `incremental` saw, and what it returns: the next cursor."""

    def __init__(self) -> None:
        self.windows: dict[datetime, Window] = {}
        self.lock = threading.Lock()
        self.returns: Any = None  # None: a cursor one past the previous one

    def __call__(self, ctx: JobContext) -> Any:
        with self.lock:
            self.windows[ctx.slot] = ctx.window
        if self.returns is not None:
            return self.returns
        previous = ctx.window.previous_result
        return {"cursor": (previous or {"cursor": 0})["cursor"] + 1, "slot": ctx.slot.isoformat()}


def work(db_url: str, handler: Any) -> None:
    """A worker of job `incremental` (its own loop, threads and finish), until nothing is claimable."""
    flags = ["--id", "w", "--until-idle", "--poll", "0.2", "--database-url", db_url]
    w = Worker(worker_settings(["--app", "unused", *flags], {}), {"incremental": handler})
    assert w.run() == 0


def run_row(conn: psycopg.Connection[Any], slot: datetime) -> dict[str, Any]:
    row = conn.execute(
        "SELECT status::text AS status, result, run_window, last_error, attempts FROM fleet.job_runs "
        "WHERE schedule_name = 'q' AND scheduled_for = %s",
        (slot,),
    ).fetchone()
    assert row is not None
    return dict(row)


def test_the_first_run_then_a_run_after_downtime_see_their_windows(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    quarterly(conn)
    seen = Seen()
    tick(conn, T0 + 10 * SEC)
    work(db_url, seen)
    assert seen.windows == {T0: Window(None, None, None)}  # the first run ever
    assert seen.windows[T0].first_run
    assert run_row(conn, T0)["result"] == {"cursor": 1, "slot": T0.isoformat()}

    # Outage 10:02-10:52: 10:15, 10:30 and 10:45 missed; `latest` runs 10:45, standing for the others.
    tick(conn, T0 + 52 * MIN)
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 2
    work(db_url, seen)
    assert seen.windows[T0 + 45 * MIN] == Window(
        T0, {"cursor": 1, "slot": T0.isoformat()}, Collapsed(2, T0 + 15 * MIN, T0 + 30 * MIN)
    )
    # The window is kept on the run: an operator (or `fleetctl trace`) reads what it covered.
    kept = run_row(conn, T0 + 45 * MIN)
    assert kept["result"] == {"cursor": 2, "slot": (T0 + 45 * MIN).isoformat()}
    assert kept["run_window"]["collapsed"] == 2 and kept["run_window"]["previous_result"]["cursor"] == 1

    # On time again: the next run's window is the slot before, nothing folded in.
    tick(conn, T0 + 60 * MIN + 5 * SEC)
    work(db_url, seen)
    assert seen.windows[T0 + 60 * MIN] == Window(
        T0 + 45 * MIN, {"cursor": 2, "slot": (T0 + 45 * MIN).isoformat()}, None
    )


def window(conn: psycopg.Connection[Any], a: Attempt, worker: str) -> Window:
    """What attempt `a`'s handler reads as `ctx.window`, its previous success looked up on `conn`."""
    return a.context(worker, lambda x: look_up(conn, x, worker)).window


def test_every_attempt_of_a_slot_sees_the_window_its_first_read(conn: psycopg.Connection[Any]) -> None:
    quarterly(conn, overlap='"allow"')
    tick(conn, T0 + 5 * SEC)
    (a,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    run_finish(conn, [(a, decide(a, "done", None))], worker_id="w")  # 10:00 done, no result
    tick(conn, T0 + 15 * MIN + 5 * SEC)
    (b,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    assert b.slot == T0 + 15 * MIN and window(conn, b, "w") == Window(T0, None, None)
    # 10:15 fails and waits to retry; meanwhile a run triggered for 10:07 succeeds with a result.
    run_finish(conn, [(b, decide(b, "failed", "boom", rand=lambda: 0.0))], worker_id="w")
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, origin, run_after, overlap) "
        "VALUES ('q', %s, 'incremental', 'trigger', now(), 'allow')",
        (T0 + 7 * MIN,),
    )
    got, _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    (t,) = [x for x in got if x.slot == T0 + 7 * MIN]
    (b2,) = [x for x in got if x.slot == T0 + 15 * MIN]
    assert window(conn, t, "w") == Window(T0, None, None)
    assert b2.attempt == 2 and window(conn, b2, "w") == Window(T0, None, None)  # as its first attempt's
    run_finish(conn, [(t, decide(t, "done", None))], worker_id="w")
    conn.execute(
        "UPDATE fleet.job_runs SET result = '{\"cursor\": 7}' WHERE scheduled_for = %s", (T0 + 7 * MIN,)
    )
    # the retry's lease runs out (its worker died): the attempt that retakes it sees the same window
    conn.execute(
        "UPDATE fleet.job_runs SET locked_until = now() - interval '1 second' WHERE status = 'running'"
    )
    (b3,), _ = run_claim(conn, worker_id="w2", jobs=["incremental"], limit=10, lease_s=30)
    assert (b3.slot, b3.attempt) == (T0 + 15 * MIN, 3) and window(conn, b3, "w2") == Window(T0, None, None)
    # A slot claimed for the first time now sees the newest success before it: 10:07 and its result.
    tick(conn, T0 + 30 * MIN + 5 * SEC)
    (c,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    assert c.slot == T0 + 30 * MIN and window(conn, c, "w") == Window(T0 + 7 * MIN, {"cursor": 7}, None)


def test_overlapping_runs_each_see_the_previous_successful_slot(conn: psycopg.Connection[Any]) -> None:
    quarterly(conn, overlap='"allow"')
    tick(conn, T0 + 5 * SEC)
    (a,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    run_finish(conn, [(a, decide(a, "done", None))], worker_id="w")
    tick(conn, T0 + 15 * MIN + 5 * SEC)
    (b,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    # 10:15 still runs when 10:30 starts: its window reaches back to 10:00, the last success.
    tick(conn, T0 + 30 * MIN + 5 * SEC)
    (c,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    assert window(conn, c, "w").previous_slot == T0
    run_finish(conn, [(b, decide(b, "done", None))], worker_id="w")
    tick(conn, T0 + 45 * MIN + 5 * SEC)
    (d,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    assert window(conn, d, "w").previous_slot == T0 + 15 * MIN  # 10:30 still runs: not a success yet
    run_finish(conn, [(c, decide(c, "failed", "boom")), (d, decide(d, "done", None))], worker_id="w")
    tick(conn, T0 + 60 * MIN + 5 * SEC)
    (e,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    assert window(conn, e, "w").previous_slot == T0 + 45 * MIN


def test_runs_created_ahead_and_missed_are_folded_into_the_one_kept(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    # A ticker with an hour's lookahead creates 10:00 to 10:45 ahead at 09:59; then the fleet is
    # away until 10:52: the four runs were not started within their grace, and `latest` keeps one.
    quarterly(conn)
    tick(conn, T0 - MIN, lookahead=60 * MIN)
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE start_by IS NOT NULL") == 4
    tick(conn, T0 + 52 * MIN, lookahead=60 * MIN)
    assert settle.run_once(conn, now=T0 + 52 * MIN).skipped == 3
    seen = Seen()
    work(db_url, seen)
    assert list(seen.windows) == [T0 + 45 * MIN]
    assert seen.windows[T0 + 45 * MIN] == Window(None, None, Collapsed(3, T0, T0 + 30 * MIN))


@pytest.mark.parametrize(
    ("catchup", "back", "kept", "collapsed"),
    [
        # Away until 11:02, past the runs created ahead: the plan keeps 11:00 itself (`latest`, or
        # `all` with max_catchup 1), which leaves the four runs created ahead no room.
        ('"latest"', 62, 60, Collapsed(4, T0, T0 + 45 * MIN)),
        ('"all"', 62, 60, Collapsed(4, T0, T0 + 45 * MIN)),
        # Away until 11:32: the plan misses 11:00 and 11:15 itself and keeps 11:30; the runs created
        # ahead come before them, and its window names all six.
        ('"latest"', 92, 90, Collapsed(6, T0, T0 + 75 * MIN)),
    ],
)
def test_runs_created_ahead_and_missed_are_folded_into_the_newer_run_the_plan_keeps(
    db_url: str, conn: psycopg.Connection[Any], catchup: str, back: int, kept: int, collapsed: Collapsed
) -> None:
    quarterly(conn, catchup=catchup, max_catchup="1")
    tick(conn, T0 - MIN, lookahead=60 * MIN)
    tick(conn, T0 + back * MIN)  # skips them in the transaction that creates the run kept
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'skipped'") == 4
    assert settle.run_once(conn, now=T0 + back * MIN).schedules == 0
    seen = Seen()
    work(db_url, seen)
    assert list(seen.windows) == [T0 + kept * MIN]
    assert seen.windows[T0 + kept * MIN] == Window(None, None, collapsed)


def test_a_result_that_cannot_be_stored_makes_the_run_dead_naming_the_cap(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    quarterly(conn)
    tick(conn, T0 + 10 * SEC)
    seen = Seen()
    seen.returns = {"rows": ["x" * 100] * 100}  # about 10 KiB of JSON
    work(db_url, seen)
    row = run_row(conn, T0)
    assert row["status"] == "dead" and row["attempts"] == 1 and row["result"] is None  # not retried
    assert row["last_error"].startswith("result: 10,310 bytes of JSON, more than the 8,192 a run may store")
    # the next run's window still reaches back past it: nothing succeeded
    tick(conn, T0 + 15 * MIN + 5 * SEC)
    seen.returns = None
    work(db_url, seen)
    assert seen.windows[T0 + 15 * MIN] == Window(None, None, None)


def test_the_previous_success_is_looked_up_at_the_first_read_only(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    quarterly(conn, overlap='"allow"')
    tick(conn, T0 + 5 * SEC)
    # A handler that never reads its window costs no lookup: nothing is kept with the run.
    work(db_url, lambda ctx: None)
    assert run_row(conn, T0)["status"] == "done" and run_row(conn, T0)["run_window"] is None
    tick(conn, T0 + 15 * MIN + 5 * SEC)
    (b,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    assert run_row(conn, b.slot)["run_window"] is None  # the claim looks nothing up
    reads: list[Attempt] = []

    def look(x: Attempt) -> dict[str, Any]:
        reads.append(x)
        return look_up(conn, x, "w")

    ctx = b.context("w", look)
    assert ctx.window == Window(T0, None, None) and ctx.window.previous_slot == T0
    assert len(reads) == 1  # read twice, looked up once
    assert run_row(conn, b.slot)["run_window"] == {
        "previous_slot": "2026-11-02T10:00:00+00:00",
        "previous_result": None,
    }
    assert b.context("w", look).window == Window(T0, None, None) and len(reads) == 1  # kept with the attempt
    # An attempt that no longer holds its run reads what the lookup finds, and keeps nothing.
    tick(conn, T0 + 30 * MIN + 5 * SEC)
    (c,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)
    conn.execute(
        "UPDATE fleet.job_runs SET locked_until = now() - interval '1 second' WHERE scheduled_for = %s",
        (c.slot,),
    )
    (c2,), _ = run_claim(conn, worker_id="w2", jobs=["incremental"], limit=10, lease_s=30)
    assert c2.attempt == 2
    run_finish(conn, [(b, decide(b, "done", None))], worker_id="w")  # 10:15 succeeds meanwhile
    assert window(conn, c, "w") == Window(T0 + 15 * MIN, None, None)
    assert run_row(conn, c.slot)["run_window"] is None
    # The attempt holding it now reads it first: fixed from here on, for every later attempt.
    assert window(conn, c2, "w2") == Window(T0 + 15 * MIN, None, None)
    assert run_row(conn, c.slot)["run_window"]["previous_slot"] == "2026-11-02T10:15:00+00:00"


def test_a_window_that_cannot_be_read_fails_the_attempt_naming_it(conn: psycopg.Connection[Any]) -> None:
    quarterly(conn, overlap='"allow"')
    tick(conn, T0 + 5 * SEC)
    (a,), _ = run_claim(conn, worker_id="w", jobs=["incremental"], limit=10, lease_s=30)

    def down(x: Attempt) -> dict[str, Any]:
        raise psycopg.OperationalError("connection refused")

    with pytest.raises(
        RuntimeError, match="ctx.window could not be read from the database: connection refused"
    ):
        a.context("w", down).window  # noqa: B018 - the read is the test


def test_async_handlers_and_command_jobs_read_their_windows_through_a_worker(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    quarterly(conn)
    tick(conn, T0 + 5 * SEC)
    work(db_url, lambda ctx: {"cursor": 1})
    seen: list[Window] = []

    async def reads(ctx: JobContext) -> None:
        seen.append(ctx.window)

    tick(conn, T0 + 15 * MIN + 5 * SEC)
    work(db_url, reads)
    assert seen == [Window(T0, {"cursor": 1}, None)]
    out = tmp_path / "previous.txt"
    command = CommandJob(
        "report", ("/bin/sh", "-c", f'printf "%s" "$FLEET_PREVIOUS_SLOT" > {out}'), {}, frozenset(), None, 5.0
    )
    tick(conn, T0 + 30 * MIN + 5 * SEC)
    work(db_url, command)
    assert out.read_text() == "2026-11-02T10:15:00Z"
    assert run_row(conn, T0 + 30 * MIN)["run_window"]["previous_slot"] == "2026-11-02T10:15:00+00:00"
