"""`fleetctl show`, `trace` and `dead`: trace ids, the Jaeger search link, dead runs across schedules."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import orjson
import psycopg
import pytest

from fleet.observe import telemetry
from fleet.worker.claim import run_claim
from fleet.worker.finish import decide, run_finish
from tests.integration.ops_support import fleetctl, fleetctl_json
from tests.support import apply_text

SLOT = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)


def one_failed_then_running(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "nightly"\nevery = "1d"\njob = "noop"\nstart_at = "2099-01-01T00:00:00Z"\n',
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after)"
        " VALUES ('nightly', %s, 'noop', %s)",
        (SLOT, SLOT),
    )
    (a,), _ = run_claim(conn, worker_id="w1", jobs=["noop"], limit=1, lease_s=30)
    run_finish(conn, [(a, decide(a, "failed", "boom", rand=lambda: 0.0))], worker_id="w1")
    run_claim(conn, worker_id="w2", jobs=["noop"], limit=1, lease_s=30)


def test_show_and_trace_print_each_attempts_ids_and_a_jaeger_link(
    conn: psycopg.Connection[Any],
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telemetry, "enabled", lambda: True)  # the claims are made by a tracing worker
    one_failed_then_running(conn)
    ids = conn.execute("SELECT trace_id, span_id FROM fleet.job_attempts").fetchone()
    current = conn.execute("SELECT trace_id, span_id FROM fleet.job_runs").fetchone()
    assert ids and current
    monkeypatch.setenv("FLEET_JAEGER_URL", "http://jaeger.internal:16686")
    code, out, _ = fleetctl(capsys, db_url, "show", "nightly", "2026-11-02T01:00:00Z")
    assert code == 0
    for value in (*ids.values(), *current.values()):
        assert value in out
    link = next(line for line in out.splitlines() if line.startswith("jaeger: ")).removeprefix("jaeger: ")
    url = urlparse(link)
    assert url.netloc == "jaeger.internal:16686" and url.path == "/search"
    tags = orjson.loads(parse_qs(url.query)["tags"][0])
    assert tags == {"fleet.schedule": "nightly", "fleet.slot": "2026-11-02T01:00:00Z"}

    code, out, _ = fleetctl(capsys, db_url, "trace", "nightly", "2026-11-02T01:00:00Z")
    assert code == 0
    assert f"attempt 1: trace {ids['trace_id']} span {ids['span_id']} (failed, w1)" in out
    assert f"attempt 2: trace {current['trace_id']} span {current['span_id']} (running, w2)" in out
    _, data = fleetctl_json(capsys, db_url, "trace", "nightly", "2026-11-02T01:00:00Z")
    assert [a["trace_id"] for a in data["attempts"]] == [ids["trace_id"], current["trace_id"]]
    assert [a["traced"] for a in data["attempts"]] == [True, True] and data["jaeger_url"] == link
    _, (run,) = fleetctl_json(capsys, db_url, "runs", "nightly")
    assert run["traced"] is True

    code, _, err = fleetctl(capsys, db_url, "trace", "nope", "2026-11-02T01:00:00Z")
    assert code == 2 and "nope" in err


def test_attempts_of_a_worker_without_tracing_get_no_jaeger_link(
    conn: psycopg.Connection[Any], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not telemetry.enabled()
    one_failed_then_running(conn)
    ids = conn.execute("SELECT trace_id, span_id FROM fleet.job_attempts").fetchone()
    assert ids and ids["trace_id"]  # the claim made ids all the same (log lines carry them)
    for command in ("show", "trace"):
        code, out, _ = fleetctl(capsys, db_url, command, "nightly", "2026-11-02T01:00:00Z")
        assert code == 0 and "http" not in out and ids["trace_id"] in out
        assert "jaeger: no attempt of this slot was traced" in out and out.count("· not traced") == 2
        _, data = fleetctl_json(capsys, db_url, command, "nightly", "2026-11-02T01:00:00Z")
        assert data["jaeger_url"] is None
        attempts = data["attempts" if command == "trace" else "attempt_history"]
        assert [a["traced"] for a in attempts] == [False, False]
    _, (run,) = fleetctl_json(capsys, db_url, "runs", "nightly")
    assert run["traced"] is False


def test_dead_lists_dead_runs_and_exits_1(
    conn: psycopg.Connection[Any], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    apply_text(
        conn, '[[schedule]]\nname = "a"\nevery = "1d"\njob = "noop"\nstart_at = "2099-01-01T00:00:00Z"\n'
    )
    assert fleetctl(capsys, db_url, "dead")[:2] == (0, "no dead runs\n")
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, run_after)"
        " VALUES ('a', %s, 'noop', %s)",
        (SLOT, SLOT),
    )
    (a,), _ = run_claim(conn, worker_id="w", jobs=["noop"], limit=1, lease_s=30)
    run_finish(conn, [(a, decide(a, "permanent", "Permanent: bad input"))], worker_id="w")
    code, data = fleetctl_json(capsys, db_url, "dead")
    assert code == 1 and [(d["schedule"], d["slot"]) for d in data] == [("a", "2026-11-02T01:00:00Z")]
    assert "bad input" in data[0]["last_error"]
    assert fleetctl(capsys, db_url, "dead", "missing")[0] == 2
