"""fleetctl metrics: scrapes parse with Prometheus' own text parser and carry the health numbers and
counters, computed from the database."""

from __future__ import annotations

import signal
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.ops.metrics import FleetCollector, parse_listen
from fleet.ops.repair_commands import run_prune
from tests.integration.ops_support import add_run, samples, value
from tests.support import Proc, apply_text, env_for, fleetctl_cmd, live_ticker, processes, scalar, wait_for

SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)


def test_a_scrape_carries_health_numbers_and_counters_that_survive_prune(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\noverlap = "allow"\n'
        '[[schedule]]\nname = "t"\nevery = "1m"\njob = "noop"\n',
    )
    conn.execute(
        "UPDATE fleet.schedules SET created_at = now() - interval '1 day', updated_at = now() - interval '1 day'"
    )
    conn.execute(
        "INSERT INTO fleet.processes (id, kind, host, pid, jobs) VALUES ('w', 'worker', 'h', 1, '{noop}')"
    )
    live_ticker(conn)
    add_run(conn, "s", SLOT, "dead", error="boom")
    add_run(conn, "s", SLOT + timedelta(hours=1), finished="now() - interval '5 minutes'")
    collector = FleetCollector(db_url, settle_s=0)

    first = samples(collector.render().decode())
    assert value(first, "fleet_database_up") == 1
    assert value(first, "fleet_schedule_dead_runs", schedule="s") == 1
    assert value(first, "fleet_schedule_healthy", schedule="s") == 0
    assert value(first, "fleet_schedule_verdict", schedule="s", verdict="DEAD") == 1
    assert value(first, "fleet_schedule_verdict", schedule="s", verdict="OK") == 0
    assert 300 <= value(first, "fleet_schedule_since_last_success_seconds", schedule="s") < 310
    assert value(first, "fleet_schedule_interval_seconds", schedule="t") == 60
    assert value(first, "fleet_schedule_verdict", schedule="t", verdict="LATE") == 1  # a day without success
    assert value(first, "fleet_processes", kind="worker") == 1
    by_verdict = {v: value(first, "fleet_schedules", verdict=v) for v in ("DEAD", "LATE", "OK", "PAUSED")}
    assert by_verdict == {"DEAD": 1, "LATE": 1, "OK": 0, "PAUSED": 0}  # s and t, each counted once
    # counting starts with the exporter: what finished before is not counted
    assert value(first, "fleet_runs_finished_total", schedule="s", status="done") == 0

    # two runs finish (one after a lost lease and a failure), then the exporter is scraped again
    for h, attempts in ((2, 3), (3, 1)):
        add_run(conn, "s", SLOT + timedelta(hours=h), "done", attempts=attempts)
    conn.execute(
        "UPDATE fleet.job_attempts SET outcome = 'lease_expired' WHERE scheduled_for = %s AND attempt = 1",
        (SLOT + timedelta(hours=2),),
    )
    conn.execute(
        "UPDATE fleet.job_runs SET started_at = run_after + interval '40 milliseconds' WHERE scheduled_for >= %s",
        (SLOT + timedelta(hours=2),),
    )
    conn.execute(
        "UPDATE fleet.job_attempts SET started_at = scheduled_for + interval '3 seconds' WHERE attempt = 1"
    )
    second = samples(collector.render().decode())
    assert value(second, "fleet_runs_finished_total", schedule="s", status="done") == 2
    assert value(second, "fleet_attempts_total", schedule="s", outcome="done") == 2
    assert value(second, "fleet_attempts_total", schedule="s", outcome="failed") == 1
    assert value(second, "fleet_reclaims_total", schedule="s") == 1
    assert value(second, "fleet_claim_latency_seconds_count", schedule="s") == 2
    assert value(second, "fleet_claim_latency_seconds_bucket", schedule="s", le="0.025") == 0
    assert value(second, "fleet_claim_latency_seconds_bucket", schedule="s", le="0.05") == 2
    assert value(second, "fleet_start_lag_seconds_sum", schedule="s") == pytest.approx(6.0)
    assert value(second, "fleet_start_lag_seconds_bucket", schedule="s", le="2.5") == 0
    assert value(second, "fleet_start_lag_seconds_bucket", schedule="s", le="5.0") == 2

    # pruning deletes rows; the counters do not go down
    conn.execute(
        "UPDATE fleet.job_runs SET finished_at = finished_at - interval '10 days' WHERE status = 'done'"
    )
    assert run_prune(conn, timedelta(days=1), pause_s=0).runs > 0
    third = samples(collector.render().decode())
    assert value(third, "fleet_runs_finished_total", schedule="s", status="done") == 2
    assert value(third, "fleet_attempts_total", schedule="s", outcome="done") == 2


def test_the_exporter_reports_a_database_it_cannot_reach() -> None:
    collector = FleetCollector("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1", settle_s=0)
    scrape = samples(collector.render().decode())
    assert value(scrape, "fleet_database_up") == 0


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9464") == ("0.0.0.0", 9464)
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9") == ("::1", 9)


def test_fleetctl_metrics_serves_http_until_stopped(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\n')
    live_ticker(conn)
    with processes() as procs:
        p = Proc(
            fleetctl_cmd("metrics", "--listen", "127.0.0.1:0"), env_for(db_url), tmp_path / "metrics.log"
        )
        procs.append(p)
        line = wait_for(
            lambda: next((x for x in p.output().splitlines() if x.startswith("serving metrics on ")), None),
            timeout=20,
            what="the exporter to listen",
        )
        assert line is not None
        url = line.removeprefix("serving metrics on ")
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            scrape = samples(response.read().decode())
        assert value(scrape, "fleet_database_up") == 1
        assert value(scrape, "fleet_schedule_healthy", schedule="s") == 1
        p.signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.schedules") == 1


def test_a_family_is_written_again_when_its_values_or_the_schedules_change(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    # a render reuses the samples of a family whose values did not change since the last one
    apply_text(conn, '[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n')
    live_ticker(conn)
    collector = FleetCollector(db_url, settle_s=0)
    first = samples(collector.render().decode())
    assert value(first, "fleet_schedule_paused", schedule="a") == 0
    assert value(first, "fleet_schedule_verdict", schedule="a", verdict="OK") == 1
    again = samples(collector.render().decode())
    assert {k: v for k, v in again.items() if "seconds" not in k[0]} == {
        k: v for k, v in first.items() if "seconds" not in k[0]
    }
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'a'")
    paused = samples(collector.render().decode())
    assert value(paused, "fleet_schedule_paused", schedule="a") == 1
    assert value(paused, "fleet_schedule_verdict", schedule="a", verdict="PAUSED") == 1
    assert value(paused, "fleet_schedule_verdict", schedule="a", verdict="OK") == 0
    apply_text(
        conn,
        '[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n[[schedule]]\nname = "b"\nevery = "1h"\njob = "noop"\n',
    )
    both = samples(collector.render().decode())
    assert value(both, "fleet_schedule_paused", schedule="a") == 1  # apply does not resume
    assert value(both, "fleet_schedule_paused", schedule="b") == 0
    assert value(both, "fleet_runs_finished_total", schedule="b", status="done") == 0
    # the run counters are read again only when runs were counted, and keep their counts between
    add_run(conn, "b", SLOT, "done", finished="now() + interval '1 second'")
    wait_for(
        lambda: scalar(conn, "SELECT now() > finished_at FROM fleet.job_runs"), timeout=5, what="the run"
    )
    for _ in range(2):
        counted = samples(collector.render().decode())
        assert value(counted, "fleet_runs_finished_total", schedule="b", status="done") == 1
        assert value(counted, "fleet_runs_finished_total", schedule="a", status="done") == 0


def _health_families(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[Any, float]:
    """The per-schedule health samples, their durations (which move with the clock) by label only."""
    return {
        k: (0.0 if k[0].endswith("_seconds") and "timestamp" not in k[0] else v)
        for k, v in scrape.items()
        if k[0].startswith("fleet_schedule_")
    }


def test_a_family_is_written_again_piece_by_piece(db_url: str, conn: psycopg.Connection[Any]) -> None:
    # pieces of two schedules: a change rewrites the piece it falls in, and the text is the same as
    # a fresh collector's, with any piece size
    names = ["a", "b.1", "c@x", "d", "e"]
    apply_text(conn, "".join(f'[[schedule]]\nname = "{n}"\nevery = "1h"\njob = "noop"\n' for n in names))
    add_run(conn, "a", SLOT, finished="now() - interval '5 minutes'")
    collector = FleetCollector(db_url, settle_s=0, chunk=2)
    first = samples(collector.render().decode())
    assert ("fleet_schedule_since_last_success_seconds", (("schedule", "a"),)) in first
    assert ("fleet_schedule_since_last_success_seconds", (("schedule", "d"),)) not in first
    assert value(first, "fleet_schedule_quiet_seconds", schedule="c@x") >= 0
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'b.1'")
    add_run(conn, "d", SLOT, finished="now() - interval '1 minute'")
    add_run(conn, "e", SLOT, "dead", error="boom")
    changed = samples(collector.render().decode())
    assert value(changed, "fleet_schedule_paused", schedule="b.1") == 1
    assert value(changed, "fleet_schedule_paused", schedule="a") == 0
    assert value(changed, "fleet_schedule_since_last_success_seconds", schedule="d") >= 60
    assert value(changed, "fleet_schedule_dead_runs", schedule="e") == 1
    assert value(changed, "fleet_schedule_verdict", schedule="e", verdict="DEAD") == 1
    for chunk in (1, 2, 1000):
        fresh = samples(FleetCollector(db_url, settle_s=0, chunk=chunk).render().decode())
        assert _health_families(fresh) == _health_families(changed)
    # the durations are the newest: a success moves the schedule's own, not its piece's neighbour's
    assert value(changed, "fleet_schedule_since_last_success_seconds", schedule="a") == pytest.approx(
        value(first, "fleet_schedule_since_last_success_seconds", schedule="a"), abs=30
    )
