"""fleetctl status, runs, show and workers on a real database, with situations built row by row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

from fleet.health import reading
from fleet.health.results import HEALTH_FIELDS, ScheduleHealth
from fleet.ops.status import schedule_health, write_json_chunks
from tests.integration.ops_support import add_run, fleetctl, fleetctl_json
from tests.support import apply_text, live_ticker, scalar

Cap = pytest.CaptureFixture[str]


def schedules(conn: psycopg.Connection[Any], *specs: tuple[str, str, str]) -> None:
    apply_text(
        conn,
        "".join(
            f'[[schedule]]\nname = "{n}"\n{timing}\njob = "{job}"\noverlap = "allow"\n'
            for n, timing, job in specs
        ),
    )
    conn.execute(
        "UPDATE fleet.schedules SET created_at = now() - interval '30 days',"
        " updated_at = now() - interval '30 days'"
    )


def live_worker(conn: psycopg.Connection[Any], *jobs: str, wid: str = "w1") -> None:
    conn.execute(
        "INSERT INTO fleet.processes (id, kind, host, pid, jobs) VALUES (%s, 'worker', 'h', 1, %s)",
        (wid, list(jobs)),
    )


def test_each_verdict_with_its_numbers(capsys: Cap, db_url: str, conn: psycopg.Connection[Any]) -> None:
    schedules(
        conn,
        ("ok", 'every = "1h"', "noop"),
        ("late", 'every = "1h"', "noop"),
        ("dead", 'every = "1h"', "noop"),
        ("backlog", 'every = "1m"', "noop"),
        ("noworker", 'every = "1h"', "unknown.job"),
        ("paused", 'every = "1h"', "noop"),
    )
    live_worker(conn, "noop")
    live_ticker(conn)
    now: datetime = scalar(conn, "SELECT date_trunc('second', now())")
    add_run(conn, "ok", now - timedelta(hours=1), finished="now() - interval '10 minutes'")
    add_run(conn, "late", now - timedelta(hours=3), finished="now() - interval '3 hours'")
    add_run(
        conn, "dead", now - timedelta(hours=2), "dead", finished="now() - interval '2 hours'", error="boom"
    )
    add_run(conn, "dead", now - timedelta(hours=1), finished="now() - interval '1 minute'")  # later success
    add_run(conn, "backlog", now - timedelta(minutes=1), finished="now() - interval '1 minute'")
    add_run(
        conn, "backlog", now - timedelta(minutes=3), "pending", run_after="now() - interval '150 seconds'"
    )
    add_run(conn, "backlog", now - timedelta(minutes=2), "pending", run_after="now() - interval '90 seconds'")
    add_run(conn, "noworker", now, "pending", job="unknown.job", finished=None, history=False)
    conn.execute("UPDATE fleet.schedules SET paused_at = now() - interval '5 days' WHERE name = 'paused'")

    code, payload = fleetctl_json(capsys, db_url, "status")
    assert code == 1
    by = {s["name"]: s for s in payload}
    assert {n: s["verdict"] for n, s in by.items()} == {
        "ok": "OK",
        "late": "LATE",
        "dead": "DEAD",
        "backlog": "BACKLOG",
        "noworker": "NO-WORKER",
        "paused": "PAUSED",
    }
    assert 600 <= by["ok"]["since_last_success_s"] < 610 and by["ok"]["interval_s"] == 3600
    assert 3 * 3600 <= by["late"]["since_last_success_s"] < 3 * 3600 + 10
    assert by["dead"]["dead_runs"] == 1 and by["dead"]["since_last_success_s"] < 70
    assert by["dead"]["last_outcome"] == "done"
    assert 150 <= by["backlog"]["oldest_pending_age_s"] < 160 and by["backlog"]["pending_runs"] == 2
    assert by["noworker"]["unserved_runs"] == 1 and by["noworker"]["job_served"] is False
    assert by["paused"]["since_last_success_s"] is None and by["paused"]["paused"] is True
    for s in payload:
        assert {
            "name",
            "verdict",
            "since_last_success_s",
            "dead_runs",
            "oldest_pending_age_s",
            "next_run_at",
        } <= set(s)
        assert s["next_run_at"] is None if s["paused"] else s["next_run_at"].endswith("Z")

    assert fleetctl(capsys, db_url, "status", "ok", "paused")[0] == 0
    assert fleetctl(capsys, db_url, "status", "ok", "late")[0] == 1
    code, out, err = fleetctl(capsys, db_url, "status", "ok", "nope")
    assert code == 2 and out == "" and "'nope'" in err and len(err.strip().splitlines()) == 1
    code, out, _ = fleetctl(capsys, db_url, "status")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["SCHEDULE", "VERDICT"] and len(lines) == 7
    assert any(line.split()[:2] == ["noworker", "NO-WORKER"] for line in lines)


def test_a_new_schedule_is_not_late_before_it_could_succeed(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1m"\njob = "noop"\n')
    now = scalar(conn, "SELECT now()")
    live_ticker(conn, at=now + timedelta(minutes=3))
    (h,) = schedule_health(conn, now=now + timedelta(minutes=1))
    assert h.verdict == "OK" and h.since_last_success_s is None
    (h,) = schedule_health(conn, now=now + timedelta(minutes=3))
    assert h.verdict == "LATE" and h.quiet_s >= 180


def test_late_is_measured_on_a_cron_schedule_own_cadence(conn: psycopg.Connection[Any]) -> None:
    # weekdays at 09:00: Friday to Monday is a 72-hour gap, Monday to Tuesday 24 hours
    apply_text(conn, '[[schedule]]\nname = "weekdays"\ncron = "0 9 * * 1-5"\njob = "noop"\n')
    conn.execute("UPDATE fleet.schedules SET created_at = '2026-01-01', updated_at = '2026-01-01'")
    friday = datetime(2026, 3, 6, 9, 0, tzinfo=UTC)
    add_run(conn, "weekdays", friday, finished="'2026-03-06T09:01:00Z'")
    live_ticker(conn, at=datetime(2026, 3, 11, 12, 0, tzinfo=UTC))
    monday_early = datetime(2026, 3, 9, 8, 0, tzinfo=UTC)  # 71 h after the last success
    (h,) = schedule_health(conn, now=monday_early)
    assert h.interval_s == 72 * 3600 and h.verdict == "OK"
    wednesday = datetime(2026, 3, 11, 12, 0, tzinfo=UTC)  # Monday's and Tuesday's runs never succeeded
    (h,) = schedule_health(conn, now=wednesday)
    assert h.interval_s == 24 * 3600 and h.verdict == "LATE"
    assert h.since_last_success_s == (wednesday - datetime(2026, 3, 6, 9, 1, tzinfo=UTC)).total_seconds()


def test_runs_and_show_give_a_slot_history_attempt_by_attempt(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    schedules(conn, ("s", 'every = "1h"', "noop"))
    slot = datetime(2026, 3, 1, 10, tzinfo=UTC)
    add_run(conn, "s", slot, "dead", attempts=3, error="boom 3")
    add_run(conn, "s", slot + timedelta(hours=1), "done", attempts=2)
    add_run(conn, "s", slot + timedelta(hours=2), "pending", attempts=0, finished=None)

    code, runs = fleetctl_json(capsys, db_url, "runs", "s")
    assert [(r["slot"], r["status"], r["attempts"]) for r in runs] == [
        ("2026-03-01T12:00:00Z", "pending", 0),
        ("2026-03-01T11:00:00Z", "done", 2),
        ("2026-03-01T10:00:00Z", "dead", 3),
    ]
    code, runs = fleetctl_json(capsys, db_url, "runs", "s", "--status", "dead", "--limit", "5")
    assert [r["slot"] for r in runs] == ["2026-03-01T10:00:00Z"]
    code, runs = fleetctl_json(capsys, db_url, "runs", "s", "--limit", "1")
    assert len(runs) == 1
    code, out, _ = fleetctl(capsys, db_url, "runs", "s")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["SLOT", "STATUS", "ORIGIN"]

    code, shown = fleetctl_json(capsys, db_url, "show", "s", "2026-03-01T10:00:00Z")
    assert shown["status"] == "dead" and shown["last_error"] == "boom 3"
    assert [
        (a["attempt"], a["worker_id"], a["host"], a["outcome"], a["error"]) for a in shown["attempt_history"]
    ] == [
        (1, "w1", "h", "failed", "boom 1"),
        (2, "w2", "h", "failed", "boom 2"),
        (3, "w3", "h", "failed", "boom 3"),
    ]
    assert all(
        a["started_at"] and a["finished_at"] and len(a["trace_id"]) == 32 for a in shown["attempt_history"]
    )
    code, out, _ = fleetctl(capsys, db_url, "show", "s", "2026-03-01 10:00")  # no offset: UTC
    assert code == 0 and "attempt 2: failed" in out and "boom 2" in out

    # an attempt in flight is shown from the run row
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'running', attempts = 1, locked_by = 'w9', started_at = now(), "
        "locked_until = now() + interval '1 minute', trace_id = 'abc' WHERE scheduled_for = %s",
        (slot + timedelta(hours=2),),
    )
    code, shown = fleetctl_json(capsys, db_url, "show", "s", "2026-03-01T12:00:00Z")
    assert [
        (a["attempt"], a["worker_id"], a["outcome"], a["trace_id"]) for a in shown["attempt_history"]
    ] == [(1, "w9", "running", "abc")]

    for args, named in (
        (("runs", "nope"), "'nope'"),
        (("show", "nope", "2026-03-01T10:00:00Z"), "'nope'"),
        (("show", "s", "2026-03-01T09:00:00Z"), "2026-03-01T09:00:00Z"),
        (("show", "s", "tomorrow"), "ISO-8601"),
        (("runs", "s", "--limit", "0"), "--limit"),
    ):
        code, out, err = fleetctl(capsys, db_url, *args)
        assert code == 2 and named in err and len(err.strip().splitlines()) == 1, (args, err)
    assert fleetctl(capsys, db_url, "runs", "s", "--status", "weird")[0] == 2


def test_workers_lists_live_processes_only(capsys: Cap, db_url: str, conn: psycopg.Connection[Any]) -> None:
    schedules(conn, ("s", 'every = "1h"', "noop"))
    live_worker(conn, "noop", "sleep", wid="host-a:worker-1")
    live_worker(conn, "noop", wid="host-b:worker-gone")
    conn.execute("UPDATE fleet.processes SET seen_at = now() - interval '10 minutes' WHERE id LIKE '%gone'")
    conn.execute(
        "INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('host-a:ticker', 'ticker', 'host-a', 2)"
    )
    add_run(conn, "s", datetime(2026, 3, 1, tzinfo=UTC), "running", finished=None, history=False)
    conn.execute(
        "UPDATE fleet.job_runs SET locked_by = 'host-a:worker-1', locked_until = now() + interval '1 minute'"
    )
    code, procs = fleetctl_json(capsys, db_url, "workers")
    assert [(p["id"], p["kind"], p["running"], p["jobs"]) for p in procs] == [
        ("host-a:ticker", "ticker", 0, []),
        ("host-a:worker-1", "worker", 1, ["noop", "sleep"]),
    ]
    assert all(p["last_seen_s_ago"] < 5 for p in procs)
    code, out, _ = fleetctl(capsys, db_url, "workers")
    assert code == 0 and "host-a:worker-1" in out and "gone" not in out


def test_a_read_in_chunks_is_the_read_at_once(conn: psycopg.Connection[Any]) -> None:
    # chunks of 2 over 5 schedules: the database streams the rows while the verdicts are made, and
    # the cron schedules whose cadence the roll-up has not stored are computed from the rows
    schedules(
        conn,
        *((f"s{i}", 'every = "1h"' if i % 2 else 'cron = "0 9 * * 1-5"', "noop") for i in range(5)),
    )
    now = scalar(conn, "SELECT now()")
    whole = [h.to_json() for h in schedule_health(conn, now=now)]
    chunks = list(reading.health_chunks(conn, now=now, size=2))
    assert [len(c) for c in chunks] == [2, 2, 1]
    assert all(tuple(v) == HEALTH_FIELDS for c in chunks for v in c)  # every field, in order
    assert [ScheduleHealth(*v.values()).to_json() for c in chunks for v in c] == whole
    # the same read as tuples, field by field in the order of the dicts' keys and the record's fields
    assert reading.HEALTH_FIELDS == HEALTH_FIELDS
    rows = [v for c in reading.health_rows(conn, now=now, size=2) for v in c]
    assert [dict(zip(HEALTH_FIELDS, v, strict=True)) for v in rows] == [v for c in chunks for v in c]
    assert [h["interval_s"] in (24 * 3600, 72 * 3600) for h in whole] == [True, False, True, False, True]
    assert [h["interval_s"] for h in whole][1::2] == [3600, 3600]
    named = list(reading.health_chunks(conn, ["s3", "s1"], now=now, size=2))
    assert [v["name"] for c in named for v in c] == ["s1", "s3"]


def test_status_json_written_in_chunks_is_one_json_list(capsys: Cap) -> None:
    rows = [{"name": f"s{i}", "healthy": i != 3, "at": datetime(2026, 1, 1, tzinfo=UTC)} for i in range(5)]
    splits: list[list[list[dict[str, Any]]]] = [
        [],
        [[]],
        [rows],
        [rows[:2], rows[2:4], rows[4:]],
        [rows[:1], [], rows[1:]],
    ]
    for chunks in splits:
        healthy = write_json_chunks(chunks)
        out = capsys.readouterr().out
        flat = [r for c in chunks for r in c]
        assert out == orjson.dumps(flat, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode() + "\n"
        assert healthy is all(r["healthy"] for r in flat)
