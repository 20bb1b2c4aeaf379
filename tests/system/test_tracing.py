"""Tracing with real processes exporting OTLP/HTTP to a receiver in the test (what Jaeger ingests):
one trace per attempt, the lost attempt of a killed worker, links, handler spans, a dead collector."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.jobs import slot_iso
from tests.otlp import ReceivedSpan, Receiver, otlp_receiver
from tests.support import (
    FAST,
    Proc,
    apply_text,
    env_for,
    job_events,
    log_events,
    one_run,
    processes,
    scalar,
    ticker_cmd,
    wait_for,
    worker_cmd,
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as r:
        yield r


def traced_env(db_url: str, endpoint: str, tmp: Path, **extra: str) -> dict[str, str]:
    """A fleet process's environment exporting to `endpoint`, batches sent every 100 ms."""
    env = env_for(
        db_url,
        FLEET_TEST_DIR=str(tmp),
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
        **extra,
    )
    del env["OTEL_TRACES_EXPORTER"]  # the default: otlp
    return env


def worker(procs: list[Proc], env: dict[str, str], tmp: Path, wid: str, *extra: str) -> Proc:
    p = Proc(worker_cmd("--app", "fleet_test_jobs", "--id", wid, *FAST, *extra), env, tmp / f"{wid}.log")
    procs.append(p)
    return p


def run_row(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    r = conn.execute("SELECT * FROM fleet.job_runs WHERE schedule_name = 's'").fetchone()
    assert r is not None
    return dict(r)


def history(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM fleet.job_attempts ORDER BY attempt").fetchall()


def attempt_spans(receiver: Receiver, slot: Any, n: int) -> list[ReceivedSpan]:
    """Wait until a Jaeger search by the slot's tags finds `n` attempts; returns them by attempt."""

    def found() -> list[ReceivedSpan]:
        spans = receiver.search("fleet-worker", fleet__schedule="s", fleet__slot=slot_iso(slot))
        return spans if len(spans) >= n else []

    spans = wait_for(found, timeout=20, what=f"{n} attempt spans")
    assert len(spans) == n, [(s.attributes.get("fleet.attempt"), s.span_id) for s in spans]
    return sorted(spans, key=lambda s: s.attributes["fleet.attempt"])


def assert_attempt(span: ReceivedSpan, row: dict[str, Any], worker_id: str, job: str) -> None:
    """The span is the attempt of this history row: its ids, a root of its own trace, its attributes."""
    key = f"s:{slot_iso(row['scheduled_for'])}"
    assert (span.trace_id, span.span_id) == (row["trace_id"], row["span_id"])
    assert span.parent_span_id == "" and span.kind == "consumer" and span.name == "process s"
    assert {
        k: span.attributes.get(k)
        for k in (
            "fleet.schedule",
            "fleet.slot",
            "fleet.attempt",
            "fleet.worker_id",
            "fleet.idempotency_key",
            "fleet.job",
            "fleet.outcome",
            "messaging.system",
            "messaging.operation.type",
            "messaging.destination.name",
            "messaging.message.id",
        )
    } == {
        "fleet.schedule": "s",
        "fleet.slot": slot_iso(row["scheduled_for"]),
        "fleet.attempt": row["attempt"],
        "fleet.worker_id": worker_id,
        "fleet.idempotency_key": key,
        "fleet.job": job,
        "fleet.outcome": row["outcome"],
        "messaging.system": "fleet",
        "messaging.operation.type": "process",
        "messaging.destination.name": "s",
        "messaging.message.id": key,
    }


def us(ns: int) -> int:
    return ns // 1000


def ts_us(t: Any) -> int:
    return int(t.timestamp() * 1_000_000)


def test_a_killed_attempt_is_emitted_by_the_worker_that_reclaims_it(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, receiver: Receiver
) -> None:
    # The slot is created by a real ticker (catch-up "latest" of an hourly schedule that started earlier).
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1h"\njob = "sleep"\nargs = { seconds = 1.5 }\n'
        'start_at = "2026-01-01T00:00:00Z"\ncatchup = "latest"\n',
    )
    env = traced_env(db_url, receiver.endpoint, tmp_path)
    with processes() as procs:
        # No lookahead: the next hour's slot is not created, however near.
        ticker = Proc(
            ticker_cmd("--until-idle", "--id", "t1", "--lookahead", "0"), env, tmp_path / "ticker.log"
        )
        procs.append(ticker)
        assert ticker.wait(timeout=30) == 0, ticker.output()
        a = worker(procs, env, tmp_path, "a")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        b = worker(procs, env, tmp_path, "b")
        a.signal(signal.SIGKILL)
        wait_for(lambda: run_row(conn)["status"] == "done", timeout=20, what="b to finish the run")
        run = run_row(conn)
        first, second = attempt_spans(receiver, run["scheduled_for"], 2)
        assert b.popen.poll() is None
    rows = history(conn)
    assert [(r["attempt"], r["worker_id"], r["outcome"]) for r in rows] == [
        (1, "a", "lease_expired"),
        (2, "b", "done"),
    ]
    assert [r["traced"] for r in rows] == [True, True]  # b traces, and emitted the lost attempt too

    # The ticker's span, whose ids the slot stores.
    (tick,) = receiver.search("fleet-ticker")
    assert (tick.trace_id, tick.span_id) == (run["created_trace_id"], run["created_span_id"])
    assert (
        tick.kind == "producer" and tick.parent_span_id == "" and tick.attributes["fleet.slots.created"] == 1
    )
    assert tick.resource["service.instance.id"] == "t1"

    # Attempt 1 died with its worker; b emitted it: stored ids, real start, ended at the reclaim.
    assert_attempt(first, rows[0], "a", "sleep")
    assert (first.status, first.status_message) == ("error", "lease expired")
    assert first.resource["service.instance.id"] == "b"
    assert us(first.start_ns) == ts_us(rows[0]["started_at"])
    assert us(first.end_ns) == ts_us(rows[1]["started_at"])  # the reclaiming claim's database time
    # Attempt 2, a trace of its own, links to attempt 1 and to the ticker's span.
    assert_attempt(second, rows[1], "b", "sleep")
    assert second.status == "unset" and second.resource["service.instance.id"] == "b"
    assert second.trace_id != first.trace_id
    reclaimed = second.link("lease_reclaimed")
    assert reclaimed and (reclaimed.trace_id, reclaimed.span_id) == (first.trace_id, first.span_id)
    for span in (first, second):
        created = span.link("created_by")
        assert created and (created.trace_id, created.span_id) == (tick.trace_id, tick.span_id)
    # Nothing else claims to be attempt 1 (the dead worker exported nothing).
    assert [s.span_id for s in receiver.spans].count(first.span_id) == 1


def test_a_run_lost_twice_chains_both_lost_attempts(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, receiver: Receiver
) -> None:
    one_run(conn, "sleep", "{ seconds = 2.5 }")
    env = traced_env(db_url, receiver.endpoint, tmp_path)

    def started(n: int, wid: str) -> bool:
        return any(e[0] == "start" and e[2] == str(n) and e[3] == wid for e in job_events(tmp_path))

    with processes() as procs:
        a = worker(procs, env, tmp_path, "a")
        wait_for(lambda: started(1, "a"), what="attempt 1 to start on a")
        a.signal(signal.SIGKILL)
        b = worker(procs, env, tmp_path, "b")
        wait_for(lambda: started(2, "b"), timeout=20, what="b to reclaim the run")
        slot = run_row(conn)["scheduled_for"]
        attempt_spans(receiver, slot, 1)  # b has exported the lost attempt 1
        b.signal(signal.SIGKILL)
        worker(procs, env, tmp_path, "c")
        wait_for(lambda: run_row(conn)["status"] == "done", timeout=30, what="c to finish the run")
        first, second, third = attempt_spans(receiver, slot, 3)
    rows = history(conn)
    assert [(r["attempt"], r["worker_id"], r["outcome"]) for r in rows] == [
        (1, "a", "lease_expired"),
        (2, "b", "lease_expired"),
        (3, "c", "done"),
    ]
    for span, row, wid in zip((first, second, third), rows, ("a", "b", "c"), strict=True):
        assert_attempt(span, row, wid, "sleep")
    # Each lost attempt was emitted by the worker that reclaimed it, and every attempt links to the
    # one before it: attempt 2's span, which c made from the ids stored on the run and in its history,
    # leads back to attempt 1 as attempt 3's leads to attempt 2.
    assert (first.resource["service.instance.id"], second.resource["service.instance.id"]) == ("b", "c")
    assert first.link("lease_reclaimed") is None
    for prev, nxt in ((first, second), (second, third)):
        link = nxt.link("lease_reclaimed")
        assert link and (link.trace_id, link.span_id) == (prev.trace_id, prev.span_id)


def test_retries_are_chained_attempt_traces(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, receiver: Receiver
) -> None:
    one_run(conn, "flaky", "{ fail_times = 2 }", retry='{ max_attempts = 5, base = "200ms", cap = "200ms" }')
    with processes() as procs:
        worker(procs, traced_env(db_url, receiver.endpoint, tmp_path), tmp_path, "a")
        wait_for(
            lambda: run_row(conn)["status"] == "done", timeout=20, what="the run to succeed on attempt 3"
        )
        spans = attempt_spans(receiver, run_row(conn)["scheduled_for"], 3)
    rows = history(conn)
    assert [r["outcome"] for r in rows] == ["failed", "failed", "done"]
    for span, row in zip(spans, rows, strict=True):
        assert_attempt(span, row, "a", "flaky")
        assert span.link("created_by") is None  # this run was inserted directly, not by a ticker
    assert len({s.trace_id for s in spans}) == 3
    assert spans[0].link("retry") is None
    for prev, nxt in zip(spans, spans[1:], strict=False):
        link = nxt.link("retry")
        assert link and (link.trace_id, link.span_id) == (prev.trace_id, prev.span_id)
    for n, failed in enumerate(spans[:2], start=1):
        assert failed.status == "error" and f"flaky failure on attempt {n}" in failed.status_message
        assert failed.attributes["error.type"] == "RuntimeError"
        (exc,) = [e for e in failed.events if e.name == "exception"]
        assert exc.attributes["exception.type"] == "RuntimeError"
        assert exc.attributes["exception.message"] == f"flaky failure on attempt {n}"
    assert spans[2].status == "unset" and not spans[2].events


def test_handlers_make_child_spans_and_commands_get_traceparent(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, receiver: Receiver
) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        f'[[job]]\nname = "cmd"\nargv = ["sh", "-c", "echo $TRACEPARENT > {tmp_path}/traceparent"]\n'
    )
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1d"\njob = "traced"\nstart_at = "2099-01-01T00:00:00Z"\n'
        '[[schedule]]\nname = "c"\nevery = "1d"\njob = "cmd"\nstart_at = "2099-01-01T00:00:00Z"\n',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, date_trunc('second', now()), job, args, overlap, now() FROM fleet.schedules"
    )
    with processes() as procs:
        worker(procs, traced_env(db_url, receiver.endpoint, tmp_path), tmp_path, "a", "--jobs", str(jobs))
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'") == 2,
            what="both runs",
        )
        (root,) = attempt_spans(receiver, run_row(conn)["scheduled_for"], 1)
        child = wait_for(lambda: receiver.search(None, **{"app.pages": 3}), what="the handler's span")[0]
        cmd_row = conn.execute(
            "SELECT trace_id, span_id FROM fleet.job_attempts WHERE schedule_name = 'c'"
        ).fetchone()
    assert (
        child.name == "render report"
        and child.trace_id == root.trace_id
        and child.parent_span_id == root.span_id
    )
    assert child.service == "fleet-worker" and child.kind == "internal"
    assert root.attributes["app.note"] == "set by the handler"
    assert cmd_row is not None
    assert (
        tmp_path / "traceparent"
    ).read_text().strip() == f"00-{cmd_row['trace_id']}-{cmd_row['span_id']}-01"


def test_a_run_handed_back_on_sigterm_is_linked_as_handed_back(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, receiver: Receiver
) -> None:
    one_run(conn, "sleep", "{ seconds = 60 }")
    env = traced_env(db_url, receiver.endpoint, tmp_path)
    with processes() as procs:
        a = worker(procs, env, tmp_path, "a", "--lease", "30", "--heartbeat", "5", "--grace", "0.5")
        wait_for(lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="attempt 1 to start")
        b = worker(procs, env, tmp_path, "b", "--lease", "30", "--heartbeat", "5", "--grace", "0.5")
        a.signal(signal.SIGTERM)
        assert a.wait(timeout=15) == 0
        wait_for(lambda: run_row(conn)["attempts"] == 2, timeout=10, what="b to retake the run")
        b.signal(signal.SIGTERM)
        assert b.wait(timeout=15) == 0
        first, second = attempt_spans(receiver, run_row(conn)["scheduled_for"], 2)
    rows = history(conn)
    assert [r["outcome"] for r in rows] == ["handed_back", "handed_back"]
    assert_attempt(first, rows[0], "a", "sleep")
    assert_attempt(second, rows[1], "b", "sleep")
    assert first.status == "unset" and first.resource["service.instance.id"] == "a"
    link = second.link("handed_back")
    assert link and (link.trace_id, link.span_id) == (first.trace_id, first.span_id)


def test_an_unreachable_collector_costs_a_worker_nothing_but_spans(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1s"\njob = "noop"\noverlap = "allow"\n'
        'start_at = "2099-01-01T00:00:00Z"\n',
    )
    runs = 3000
    rates: dict[str, float] = {}
    exit_after = 0.0
    for mode in ("off", "unreachable", "off", "unreachable"):
        conn.execute("TRUNCATE fleet.job_attempts, fleet.job_runs")
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
            "SELECT 's', '2026-01-01'::timestamptz + make_interval(secs => g), 'noop', 'allow', now() "
            "FROM generate_series(1, %s) g",
            (runs,),
        )
        env = env_for(db_url) if mode == "off" else traced_env(db_url, closed, tmp_path)
        env.pop("FLEET_TEST_DIR", None)
        with processes() as procs:
            p = Proc(
                worker_cmd("--app", "fleet_test_jobs", "--until-idle", "--concurrency", "16", "--id", mode),
                env,
                tmp_path / f"{mode}.log",
            )
            procs.append(p)
            assert p.wait(timeout=120) == 0, p.output()
            exited = time.time()
            if mode == "unreachable":  # at most one line saying so, none of the exporter library's own
                lines = log_events(p)
                # (a worker that ends within a second or two of its first export may exit, its final
                # flush bounded, before that export gives up: then there is no line at all)
                failed = [(e["endpoint"], e["error"]) for e in lines if e["event"] == "trace_export_failed"]
                assert failed in ([], [(f"{closed}/v1/traces", "Connection refused")]), failed
                assert not [e for e in lines if e["event"] == "library_log"], lines
        row = conn.execute(
            "SELECT count(*) AS n, min(started_at) AS first, max(finished_at) AS last "
            "FROM fleet.job_attempts WHERE outcome = 'done'"
        ).fetchone()
        assert row is not None and row["n"] == runs
        # Best of two trials per mode: noise on a shared machine only ever slows a trial down.
        rates[mode] = max(rates.get(mode, 0.0), runs / (row["last"] - row["first"]).total_seconds())
        if mode == "unreachable":
            exit_after = max(exit_after, exited - row["last"].timestamp())
    off, unreachable = rates["off"], rates["unreachable"]
    print(
        f"no-op runs/s with tracing off: {off:,.0f}; to an unreachable collector: {unreachable:,.0f} "
        f"({(unreachable / off - 1) * 100:+.1f}%); the worker exited {exit_after:.1f}s after its last run"
    )
    assert unreachable > off / 2  # lenient: loadtest/tracing_overhead.py measures it properly
    assert exit_after < 10  # the final flush is bounded, whatever the collector does
