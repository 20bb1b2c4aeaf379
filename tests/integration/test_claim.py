"""Claims, leases, fencing, retries and overlap at the statement level, on a real database."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.store.db import connect
from fleet.worker.attempt import Attempt, Outcome
from fleet.worker.claim import Skipped, run_claim
from fleet.worker.finish import DONE, decide, run_finish
from fleet.worker.heartbeat import run_heartbeat
from fleet.worker.loop import run_round
from tests.support import apply_text, scalar

UTC = UTC
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
LEASE = 10.0


def fin(
    conn: psycopg.Connection[Any],
    finished: list[tuple[Attempt, Outcome]],
    now: datetime | None = None,
    worker: str = "w1",
) -> set[tuple[str, datetime]]:
    return run_finish(conn, finished, worker_id=worker, now=now)


def schedule(conn: psycopg.Connection[Any], name: str = "s", job: str = "noop", **policies: str) -> None:
    extra = "".join(f"{k} = {v}\n" for k, v in policies.items())
    apply_text(conn, f'[[schedule]]\nname = "{name}"\nevery = "1h"\njob = "{job}"\n{extra}', now=T0)


def add_run(
    conn: psycopg.Connection[Any], name: str, slot: datetime, job: str = "noop", overlap: str = "allow"
) -> None:
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) VALUES (%s, %s, %s, %s, %s)",
        (name, slot, job, overlap, slot),
    )


def claim(
    conn: psycopg.Connection[Any],
    now: datetime,
    worker: str = "w1",
    limit: int = 10,
    jobs: tuple[str, ...] = ("noop",),
) -> tuple[list[Attempt], list[Skipped]]:
    return run_claim(conn, worker_id=worker, jobs=jobs, limit=limit, lease_s=LEASE, now=now)


def row(conn: psycopg.Connection[Any], name: str = "s", slot: datetime = T0) -> dict[str, Any]:
    r = conn.execute(
        "SELECT * FROM fleet.job_runs WHERE schedule_name = %s AND scheduled_for = %s", (name, slot)
    ).fetchone()
    assert r is not None
    return dict(r)


def test_claim_takes_due_pending_runs_with_a_lease(conn: psycopg.Connection[Any]) -> None:
    schedule(conn)
    add_run(conn, "s", T0)
    add_run(conn, "s", T0 + timedelta(hours=1))  # not due yet
    got, _ = claim(conn, T0 + timedelta(seconds=1))
    assert [a.slot for a in got] == [T0]
    r = row(conn)
    assert (r["status"], r["attempts"], r["locked_by"]) == ("running", 1, "w1")
    assert r["locked_until"] == T0 + timedelta(seconds=1 + LEASE)
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 0  # written when the attempt ends
    assert len(got[0].trace_id or "") == 32 and len(got[0].span_id or "") == 16


def test_each_attempt_of_a_batch_gets_its_own_trace_and_span_ids(conn: psycopg.Connection[Any]) -> None:
    schedule(conn)
    for i in range(20):
        add_run(conn, "s", T0 + timedelta(minutes=i))
    got, _ = claim(conn, T0 + timedelta(hours=1), limit=20)
    assert len(got) == 20
    assert len({a.trace_id for a in got}) == 20 and len({a.span_id for a in got}) == 20
    for a in got:
        assert re.fullmatch("[0-9a-f]{32}", a.trace_id or "")
        assert re.fullmatch("[0-9a-f]{16}", a.span_id or "")
        assert (a.span_id or "") not in (a.trace_id or "")  # drawn from different bytes
        r = row(conn, slot=a.slot)
        assert (r["trace_id"], r["span_id"]) == (a.trace_id, a.span_id)


def test_unknown_jobs_are_never_claimed(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, job="secret")
    add_run(conn, "s", T0, job="secret")
    assert claim(conn, T0 + timedelta(seconds=1))[0] == []
    assert row(conn)["status"] == "pending"


def test_a_claim_walks_its_jobs_in_the_order_given_each_oldest_first(conn: psycopg.Connection[Any]) -> None:
    """Due runs are taken job by job in the order of the claim's list, each job's oldest first; the
    batch stops at its limit, and a job later in the list is reached when the earlier ones run out."""
    schedule(conn, "a", job="ja")
    schedule(conn, "b", job="jb")
    for i in range(4):
        add_run(conn, "a", T0 + timedelta(minutes=i), job="ja")
    add_run(conn, "b", T0 - timedelta(hours=1), job="jb")  # due before every run of ja
    now = T0 + timedelta(hours=1)
    got, _ = claim(conn, now, limit=3, jobs=("ja", "jb"))
    assert {(a.schedule, a.slot) for a in got} == {("a", T0 + timedelta(minutes=i)) for i in range(3)}
    got, _ = claim(conn, now, limit=3, jobs=("jb", "ja"))  # the worker's next claim turns the list
    assert {(a.schedule, a.slot) for a in got} == {
        ("b", T0 - timedelta(hours=1)),
        ("a", T0 + timedelta(minutes=3)),
    }
    assert claim(conn, now, limit=3, jobs=("ja", "jb"))[0] == []


def test_expired_lease_is_reclaimed_and_the_stale_worker_is_fenced(conn: psycopg.Connection[Any]) -> None:
    schedule(conn)
    add_run(conn, "s", T0)
    (first,), _ = claim(conn, T0, worker="w1")
    # Within the lease nobody else can take it.
    assert claim(conn, T0 + timedelta(seconds=LEASE - 1), worker="w2")[0] == []
    (second,), _ = claim(conn, T0 + timedelta(seconds=LEASE + 1), worker="w2")
    assert second.attempt == 2 and second.reclaimed and second.prev_worker == "w1"
    assert second.prev_span_id == first.span_id
    r = row(conn)
    assert (r["attempts"], r["failures"], r["locked_by"], r["last_outcome"]) == (2, 1, "w2", "lease_expired")
    lost = conn.execute("SELECT outcome FROM fleet.job_attempts WHERE attempt = 1").fetchone()
    assert lost == {"outcome": "lease_expired"}
    # The zombie's heartbeat and its finish match nothing.
    assert run_heartbeat(conn, [first], LEASE, "w1") == set()
    assert fin(conn, [(first, Outcome("done", "done"))], worker="w1") == set()
    after = row(conn)
    assert (after["status"], after["attempts"], after["locked_by"], after["finished_at"]) == (
        "running",
        2,
        "w2",
        None,
    )
    # The current owner's writes go through.
    assert run_heartbeat(conn, [second], LEASE, "w2") == {second.ident}
    assert fin(conn, [(second, Outcome("done", "done"))], worker="w2") == {second.key}
    assert row(conn)["status"] == "done"


def test_failures_retry_with_backoff_then_dead(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, retry='{ max_attempts = 3, base = "10s", cap = "15s" }')
    add_run(conn, "s", T0)
    now = T0
    ceilings = []
    for n in (1, 2, 3):
        (a,), _ = claim(conn, now)
        outcome = decide(a, "failed", "boom", rand=lambda: 0.999999)
        fin(conn, [(a, outcome)], now=now)
        r = row(conn)
        if n < 3:
            assert r["status"] == "pending" and r["failures"] == n
            ceilings.append((r["run_after"] - now).total_seconds())
            now = r["run_after"]
        else:
            assert r["status"] == "dead" and r["failures"] == 3 and "boom" in r["last_error"]
    assert ceilings == [pytest.approx(10, abs=0.01), pytest.approx(15, abs=0.01)]  # min(cap, base*2^(n-1))


def test_permanent_error_is_dead_at_once(conn: psycopg.Connection[Any]) -> None:
    schedule(conn)
    add_run(conn, "s", T0)
    (a,), _ = claim(conn, T0)
    fin(conn, [(a, decide(a, "permanent", "Permanent: no"))], now=T0)
    r = row(conn)
    assert (r["status"], r["attempts"], r["failures"]) == ("dead", 1, 1)


def test_overlap_skip_records_the_overlapping_slot_skipped(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, overlap='"skip"')
    add_run(conn, "s", T0, overlap="skip")
    (a,), _ = claim(conn, T0)
    add_run(conn, "s", T0 + timedelta(seconds=5), overlap="skip")
    got, skipped = claim(conn, T0 + timedelta(seconds=5))
    assert got == [] and [r.slot for r in skipped] == [T0 + timedelta(seconds=5)]
    r = row(conn, slot=T0 + timedelta(seconds=5))
    assert r["status"] == "skipped" and "overlap" in r["last_error"]
    # Once the first run ends the gate is free for the next slot.
    fin(conn, [(a, Outcome("done", "done"))])
    add_run(conn, "s", T0 + timedelta(seconds=8), overlap="skip")
    got, _ = claim(conn, T0 + timedelta(seconds=8))
    assert [g.slot for g in got] == [T0 + timedelta(seconds=8)]


def test_overlap_skip_keeps_the_gate_through_retries(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, overlap='"skip"')
    add_run(conn, "s", T0, overlap="skip")
    (a,), _ = claim(conn, T0)
    fin(conn, [(a, decide(a, "failed", "x", rand=lambda: 0.0))], now=T0)  # retry due at once
    add_run(conn, "s", T0 + timedelta(seconds=1), overlap="skip")
    got, skipped = claim(conn, T0 + timedelta(seconds=2))
    assert [g.slot for g in got] == [T0] and len(skipped) == 1


def test_overlap_queue_waits_for_the_previous_run(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, overlap='"queue"')
    add_run(conn, "s", T0, overlap="queue")
    (a,), _ = claim(conn, T0)
    add_run(conn, "s", T0 + timedelta(seconds=5), overlap="queue")
    assert claim(conn, T0 + timedelta(seconds=6)) == ([], [])
    assert row(conn, slot=T0 + timedelta(seconds=5))["status"] == "pending"
    fin(conn, [(a, Outcome("done", "done"))])
    got, _ = claim(conn, T0 + timedelta(seconds=7))
    assert [g.slot for g in got] == [T0 + timedelta(seconds=5)]


def test_a_freed_gate_wakes_workers_only_for_a_run_waiting_on_it(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """A finish that frees a gate notifies idle workers only when another run of the schedule is
    due and waiting: committing a notification serialises the server's notifying commits, and a
    herd of skip schedules frees a gate with every run."""

    def woken(listener: psycopg.Connection[Any]) -> int:
        return len(list(listener.notifies(timeout=0.3)))

    schedule(conn, "q", overlap='"queue"')
    schedule(conn, "k", overlap='"skip"')
    add_run(conn, "q", T0, overlap="queue")
    add_run(conn, "k", T0, overlap="skip")
    with connect(db_url, "fleet-tests listener", listen=True) as listener:
        listener.execute("LISTEN fleet_runs")
        (a, b), _ = claim(conn, T0)
        woken(listener)
        # The skip schedule's next slot is created ahead, not due yet: nothing waits on its gate.
        add_run(conn, "k", T0 + timedelta(hours=1), overlap="skip")
        [k] = [x for x in (a, b) if x.schedule == "k"]
        [qa] = [x for x in (a, b) if x.schedule == "q"]
        assert fin(conn, [(k, DONE)], now=T0 + timedelta(seconds=1)) == {k.key}
        assert scalar(conn, "SELECT count(*) FROM fleet.schedule_gates WHERE running_slot IS NOT NULL") == 1
        assert woken(listener) == 0
        # The queue schedule's next slot is due while the first runs: its finish wakes the workers.
        add_run(conn, "q", T0 + timedelta(seconds=5), overlap="queue")
        assert fin(conn, [(qa, DONE)], now=T0 + timedelta(seconds=6)) == {qa.key}
        assert woken(listener) == 1
    (c,), _ = claim(conn, T0 + timedelta(seconds=7))
    assert (c.schedule, c.slot) == ("q", T0 + timedelta(seconds=5))


def test_overlap_allow_runs_slots_together(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, overlap='"allow"')
    add_run(conn, "s", T0, overlap="allow")
    add_run(conn, "s", T0 + timedelta(seconds=1), overlap="allow")
    got, _ = claim(conn, T0 + timedelta(seconds=2))
    assert len(got) == 2


def test_reclaim_after_the_last_allowed_attempt_is_reported(conn: psycopg.Connection[Any]) -> None:
    schedule(conn, retry="{ max_attempts = 1 }")
    add_run(conn, "s", T0)
    claim(conn, T0)
    (a,), _ = claim(conn, T0 + timedelta(seconds=LEASE + 1), worker="w2")
    assert a.failures >= a.max_attempts  # the worker records it dead instead of running it


def test_one_finish_records_a_mixed_batch_and_names_what_it_wrote(conn: psycopg.Connection[Any]) -> None:
    """Plain successes travel as keys only and the rest in full, in one statement; the written
    keys come back whatever order the batch had, and a fenced-out outcome is not among them."""
    schedule(conn, retry='{ max_attempts = 3, base = "10s", cap = "15s" }')
    slots = [T0 + timedelta(seconds=i) for i in range(5)]
    for slot in slots:
        add_run(conn, "s", slot)
    got, _ = claim(conn, slots[-1])
    a = {g.slot: g for g in got}
    stale = dataclasses.replace(a[slots[4]], attempt=7)
    batch = [
        (a[slots[0]], decide(a[slots[0]], "failed", "boom", rand=lambda: 0.5)),
        (a[slots[1]], Outcome("done", "done")),
        (a[slots[2]], decide(a[slots[2]], "permanent", "Permanent: no")),
        (a[slots[3]], Outcome("done", "done")),
        (stale, Outcome("done", "done")),  # attempt 7 was never claimed: fenced out
    ]
    assert fin(conn, batch, now=T0 + timedelta(minutes=1)) == {a[s].key for s in slots[:4]}
    statuses = [row(conn, slot=s)["status"] for s in slots]
    assert statuses == ["pending", "done", "dead", "done", "running"]
    history = conn.execute(
        "SELECT scheduled_for, outcome, error, trace_id FROM fleet.job_attempts ORDER BY scheduled_for"
    ).fetchall()
    assert [(h["scheduled_for"], h["outcome"]) for h in history] == [
        (slots[0], "failed"),
        (slots[1], "done"),
        (slots[2], "dead"),
        (slots[3], "done"),
    ]
    assert history[0]["error"].startswith("boom") and history[1]["error"] is None
    assert [h["trace_id"] for h in history] == [a[s].trace_id for s in slots[:4]]


def test_a_round_is_one_transaction(conn: psycopg.Connection[Any]) -> None:
    """A worker round is a pipeline without BEGIN: its statements form one transaction that the
    closing Sync commits. The round's settings hold for the statements after them and end with
    it, and an error anywhere rolls back the whole round (a finish is never kept without its claim)."""
    from fleet.store.queries import q

    schedule(conn)
    add_run(conn, "s", T0)
    with conn.pipeline():
        conn.execute(q("round_configure"))
        inside = conn.execute("SELECT current_setting('enable_seqscan') AS v")
        conn.execute("UPDATE fleet.job_runs SET failures = 1")
    assert inside.fetchone() == {"v": "off"}
    assert conn.execute("SELECT current_setting('enable_seqscan') AS v").fetchone() == {"v": "on"}
    assert row(conn)["failures"] == 1
    with pytest.raises(psycopg.errors.DivisionByZero), conn.pipeline():
        conn.execute("UPDATE fleet.job_runs SET failures = 2")
        conn.execute("SELECT 1 / 0")
    assert row(conn)["failures"] == 1


def test_a_finish_waiting_on_a_heartbeat_of_its_runs_records_every_run(db_url: str) -> None:
    """A worker's heartbeat renews leases on its own connection, so it can update the very runs the
    loop is finishing. The finish then waits for the renewal to commit and rechecks each row's newest
    version: every run of the batch must be recorded. With the batch's two unnests inlined under the
    join, the recheck matched only the first row of a 100-run batch once the statement ran with its
    generic plan; the rest stayed running until their leases expired, and ran again."""
    n, rounds = 100, 3
    with connect(db_url, "setup") as c:
        schedule(c)
        c.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
            "SELECT 's', %s + make_interval(secs => g), 'noop', 'allow', now() FROM generate_series(1, %s) g",
            (T0, n * (rounds + 1)),
        )
    with (
        connect(db_url, "loop", prepare=True) as loop,
        connect(db_url, "heartbeat") as beat,
        connect(db_url, "check") as check,
    ):
        batch: list[tuple[Attempt, Outcome]] = []
        for _ in range(rounds):  # the generic plan is in use from here on, as in a running worker
            batch, written, claimed, _ = run_round(
                loop, batch, worker_id="w", jobs=["noop"], limit=n, lease_s=LEASE
            )
            assert len(written) == len(batch)
            batch = [(a, DONE) for a in claimed]
        assert len(batch) == n
        beat.autocommit = False
        assert len(run_heartbeat(beat, [a for a, _ in batch], LEASE, "w")) == n  # holds the rows until commit
        done: dict[str, set[int]] = {}

        def finish() -> None:
            _, done["written"], _, _ = run_round(
                loop, batch, worker_id="w", jobs=["noop"], limit=0, lease_s=LEASE
            )

        t = threading.Thread(target=finish)
        t.start()
        deadline = time.monotonic() + 10
        while (
            scalar(
                check,
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'loop' "
                "AND wait_event_type = 'Lock'",
            )
            == 0
        ):
            assert time.monotonic() < deadline, "the finish never waited for the heartbeat"
            time.sleep(0.01)
        beat.commit()
        t.join(10)
        assert not t.is_alive()
        assert done["written"] == set(range(1, n + 1))
        assert scalar(check, "SELECT count(*) FROM fleet.job_runs WHERE status = 'running'") == 0
        assert scalar(check, "SELECT count(*) FROM fleet.job_attempts") == n * rounds
