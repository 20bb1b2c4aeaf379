"""A schedule's page shows its coverage strip (the slot ledger of its last day: what became of each
stretch of slots, worst first) and plots of its lag and durations; the ledger is one link away as
JSON, bounded like the rest of the dashboard."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import orjson
import psycopg
import pytest

from fleet.health.verify import verify
from fleet.ops.dashboard.server import DashboardServer
from fleet.ops.targets import iso
from tests.integration.test_dashboard_server import dashboard as server  # noqa: F401 - the fixture
from tests.integration.test_dashboard_server import get
from tests.support import scalar

MINUTE = timedelta(minutes=1)


@pytest.fixture
def history(server: DashboardServer, conn: psycopg.Connection[Any]) -> Iterator[DashboardServer]:  # noqa: F811
    """Schedule `m` every minute for the last two hours: runs done with growing lag, a missing
    slot, a dead run and a skipped one."""
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, timing_hash, next_run_at, created_at)"
        " VALUES ('m', '1 minute', 'noop', 'x', date_trunc('minute', now()) + interval '1 minute',"
        " date_trunc('minute', now()) - interval '2 hours' + interval '30 seconds')"
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after,"
        " finished_at, last_outcome, last_error)"
        " SELECT 'm', t, 'noop', CASE m WHEN 30 THEN 'dead' WHEN 40 THEN 'skipped' ELSE 'done' END::fleet.run_status,"
        " CASE m WHEN 30 THEN 3 WHEN 40 THEN 0 ELSE 1 END, t, t + interval '2 seconds',"
        " CASE m WHEN 30 THEN 'dead' WHEN 40 THEN NULL ELSE 'done' END,"
        " CASE m WHEN 40 THEN 'overlap: an earlier run still in progress' END"
        " FROM generate_series(1, 120) m, LATERAL (SELECT date_trunc('minute', now()) - interval '2 hours'"
        " + m * interval '1 minute' AS t) x WHERE m <> 20"
    )
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at,"
        " finished_at, outcome)"
        " SELECT schedule_name, scheduled_for, 1, 'w', scheduled_for + attempts_lag, finished_at,"
        " CASE status WHEN 'dead' THEN 'dead' ELSE 'done' END"
        " FROM (SELECT r.*, make_interval(secs => extract(minute FROM r.scheduled_for) / 100.0) AS attempts_lag"
        " FROM fleet.job_runs r WHERE r.schedule_name = 'm' AND r.status <> 'skipped') x"
    )
    yield server


def cells(page: str) -> list[str]:
    coverage = re.search(r'<svg class="coverage" id="coverage".*?</svg>', page, re.S)
    assert coverage, page[:2000]
    return re.findall(r'data-outcome="([a-z_]+)"', coverage.group(0))


def test_the_coverage_strip_shows_the_worst_of_each_stretch(history: DashboardServer) -> None:
    status, body = get(history, "/schedules/m")
    assert status == 200
    page = body.decode()
    shown = cells(page)
    assert len(shown) == 120
    # the window starts when the schedule was created, two hours ago
    assert shown[0] == "once"
    assert {"unexplained", "dead", "skipped", "once"} <= set(shown)
    assert shown.count("unexplained") == 1 and shown.count("dead") == 1
    assert shown.index("unexplained") < shown.index("dead") < shown.index("skipped")
    assert 'id="coverage-section" data-ok="no"' in page
    assert "1 missing, no reason recorded" in page
    # a live refresh leaves the strip alone (it is read once per page load)
    _, fragment = get(history, "/schedules/m?fragment=1")
    assert b'id="coverage"' not in fragment and b'id="lag-plot"' in fragment


def test_the_plots_show_each_attempts_lag_and_duration(
    history: DashboardServer, conn: psycopg.Connection[Any]
) -> None:
    _, body = get(history, "/schedules/m")
    page = body.decode()
    lag = re.search(r'<svg class="plot" id="lag-plot".*?</svg>', page, re.S)
    took = re.search(r'<svg class="plot" id="duration-plot".*?</svg>', page, re.S)
    assert lag and took
    attempts = scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE schedule_name = 'm'")
    points = re.findall(
        r'<circle class="point o-([a-z_]+)" data-slot="([^"]+)" data-attempt="1" cx="([0-9.]+)" cy="([0-9.]+)"',
        lag.group(0),
    )
    assert len(points) == attempts == 118
    assert sum(1 for p in points if p[0] == "dead") == 1
    # later slots lie to the right; a longer lag (more minutes into the hour) lies higher
    xs = [float(p[2]) for p in points]
    assert xs == sorted(xs)
    by_minute = {int(p[1][14:16]): float(p[3]) for p in points}
    assert by_minute[50] < by_minute[10]
    assert len(re.findall(r"<circle ", took.group(0))) == 118


def test_the_ledger_as_json_matches_verify(history: DashboardServer, conn: psycopg.Connection[Any]) -> None:
    status, body = get(history, "/schedules/m/ledger.json")
    assert status == 200
    got = orjson.loads(body)
    now = scalar(conn, "SELECT now()")
    (expected,) = verify(conn, ["m"], now - timedelta(days=1), now).schedules
    (mine,) = got["schedules"]
    assert mine["counts"] == expected.counts and mine["counts"]["unexplained"] == 1
    since = iso(now - timedelta(hours=1))
    _, body = get(history, f"/schedules/m/ledger.json?since={since}")
    assert orjson.loads(body)["schedules"][0]["slots"] in (60, 61)
    # bounded: a month at most, and no more slots than the dashboard enumerates
    status, body = get(history, f"/schedules/m/ledger.json?since={iso(now - timedelta(days=40))}")
    assert status == 400 and b"since: a window of at most 31 days" in body
    conn.execute("UPDATE fleet.schedules SET every = '1 second' WHERE name = 'm'")
    status, body = get(history, f"/schedules/m/ledger.json?since={iso(now - timedelta(days=30))}")
    assert status == 400 and b"since: more than 2,000,000 slots" in body
    status, body = get(history, "/schedules/nope/ledger.json")
    assert status == 404
