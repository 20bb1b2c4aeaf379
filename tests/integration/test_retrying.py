"""A run waiting to retry counts as in progress: under overlap `skip` its schedule's later slots are
recorded skipped meanwhile, and RETRYING says so, naming the run, in `fleetctl status` (text, JSON,
exit code), the metrics and the dashboard (verdict, note, the run's colour and its legend)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
import pytest

from fleet.health.results import iso
from fleet.ops.metrics import FleetCollector
from fleet.worker.claim import run_claim
from fleet.worker.finish import decide, run_finish
from tests.integration.ops_support import fleetctl, fleetctl_json, samples, value
from tests.support import apply_text, live_ticker

Cap = pytest.CaptureFixture[str]


def add_due_run(conn: psycopg.Connection[Any], seconds_ago: int) -> datetime:
    """A run of `s` for the slot `seconds_ago` before the database's now, due at its slot."""
    row = conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "SELECT 's', t, 'noop', 'skip', t FROM (SELECT date_trunc('second', now()) "
        "- make_interval(secs => %s) AS t) x RETURNING scheduled_for",
        (seconds_ago,),
    ).fetchone()
    assert row is not None
    slot: datetime = row["scheduled_for"]
    return slot


def failed_once(conn: psycopg.Connection[Any], back_off: float) -> datetime:
    """The slot of a run of the hourly schedule `s` (overlap skip, a live ticker) whose first attempt
    failed, waiting to retry after `back_off` (0 to 1) of its first back-off's ceiling (30 s)."""
    apply_text(
        conn, '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\nstart_at = "2099-01-01T00:00:00Z"\n'
    )
    live_ticker(conn)
    slot = add_due_run(conn, 10)
    (a,), _ = run_claim(conn, worker_id="w1", jobs=("noop",), limit=10, lease_s=10.0)
    run_finish(conn, [(a, decide(a, "failed", "RuntimeError: boom", rand=lambda: back_off))], worker_id="w1")
    return slot


def test_a_run_waiting_to_retry_skips_later_slots_and_retrying_names_it(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    # the first attempt fails; its retry waits the whole first back-off (30 s)
    first = failed_once(conn, back_off=1.0)
    second = add_due_run(conn, 5)
    got, skipped = run_claim(conn, worker_id="w1", jobs=("noop",), limit=10, lease_s=10.0)
    assert got == [] and [k.slot for k in skipped] == [second]  # the run waiting to retry holds the slot

    code, out, _ = fleetctl(capsys, db_url, "status")
    assert code == 0, out  # the retry policy at work: healthy
    (row,) = [line for line in out.splitlines() if line.startswith("s ")]
    assert row.split()[1] == "RETRYING", row
    note = f"{iso(first)} waits to retry at "
    assert note in row and row.endswith("; later slots are skipped until it ends (overlap skip)"), row

    code, (h,) = fleetctl_json(capsys, db_url, "status")
    assert (code, h["verdict"], h["healthy"], h["problems"]) == (0, "RETRYING", True, ["RETRYING"])
    assert (h["retrying_runs"], h["retry_slot"], h["overlap"]) == (1, iso(first), "skip")
    assert h["retry_at"] > iso(first) and h["waiting_runs"] == 1 and h["last_outcome"] == "skipped"

    got_metrics = samples(FleetCollector(db_url, settle_s=0).render().decode())
    assert value(got_metrics, "fleet_schedule_verdict", schedule="s", verdict="RETRYING") == 1
    assert value(got_metrics, "fleet_schedule_retrying_runs", schedule="s") == 1
    assert value(got_metrics, "fleet_schedule_healthy", schedule="s") == 1
    assert value(got_metrics, "fleet_schedules", verdict="RETRYING") == 1

    overview, schedule, css = dashboard_pages(db_url)
    assert 'data-name="s" data-verdict="RETRYING"' in overview
    assert note in overview and "later slots are skipped until it ends (overlap skip)" in overview
    assert '<span class="verdict v-retrying" title=' in overview  # in the verdicts' legend
    # the run waiting to retry has a colour of its own, and the legend under the strips names it
    assert f'class="cell s-retrying" href="/schedules/s/slots/{iso(first)}"' in overview
    assert '<span class="key s-retrying"></span>waiting to retry' in overview.split('id="strip-legend"')[1]
    assert 'id="retrying"' in schedule and note in schedule
    assert f'href="/schedules/s/slots/{iso(first)}"><rect class="slot s-retrying"' in schedule
    assert '<span class="key s-retrying"></span>waiting to retry' in schedule.split('id="slot-legend"')[1]
    for rule in (
        ".v-retrying { background: var(--retrying);",
        ".strip .cell.s-retrying { background: var(--retrying); }",
        "svg.timeline rect.slot.s-retrying { fill: var(--retrying); }",
        ".legend .key.s-retrying { background: var(--retrying); }",
    ):
        assert rule in css, rule


def dashboard_pages(db_url: str) -> tuple[str, str, str]:
    """The dashboard's overview, the page of schedule `s` and its style sheet, as served."""
    from fleet.ops.dashboard.app import Dashboard, Request
    from fleet.ops.dashboard.config import DashboardSettings
    from fleet.ops.httpd import Credentials
    from fleet.store.pool import make_pool

    settings = DashboardSettings(
        "127.0.0.1", 0, Credentials(), read_only=True, read_only_reason="test", trace_url=""
    )
    pool = make_pool(db_url, "fleet-tests dashboard", min_size=1, max_size=2)
    app = Dashboard(settings, pool)
    try:
        got = []
        for path in ("/", "/schedules/s", "/static/dashboard.css"):
            r = app.handle(Request("GET", path, {}, {"Host": "127.0.0.1"}))
            assert r.status == 200, r.body
            got.append(r.body.decode())
        return got[0], got[1], got[2]
    finally:
        app.close()
        pool.close()


def test_a_pause_holds_a_run_waiting_to_retry_until_the_resume(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    first = failed_once(conn, back_off=0.0)  # its retry comes due at once
    assert fleetctl(capsys, db_url, "pause", "s", "--note", "downstream broken")[0] == 0
    conn.execute("UPDATE fleet.job_runs SET run_after = now() - interval '1 hour' WHERE schedule_name = 's'")
    assert run_claim(conn, worker_id="w1", jobs=("noop",), limit=10, lease_s=10.0) == ([], [])  # held

    # held, not due: no BACKLOG though it has waited an hour (an interval), and no time of its own
    code, (h,) = fleetctl_json(capsys, db_url, "status")
    assert (code, h["verdict"], h["problems"]) == (0, "RETRYING", ["RETRYING", "PAUSED"]), h
    assert (h["retrying_runs"], h["retry_slot"], h["retry_at"], h["oldest_pending_age_s"]) == (
        1,
        iso(first),
        None,
        None,
    )
    code, out, _ = fleetctl(capsys, db_url, "status")
    (row,) = [line for line in out.splitlines() if line.startswith("s ")]
    assert f"{iso(first)} waits to retry until the schedule is resumed · downstream broken" in row, row

    assert fleetctl(capsys, db_url, "resume", "s")[0] == 0
    (b,), _ = run_claim(conn, worker_id="w1", jobs=("noop",), limit=10, lease_s=10.0)
    assert (b.slot, b.attempt) == (first, 2)  # the next attempt, once resumed
