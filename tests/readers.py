"""Every reader of a fleet, asked at once: `fleetctl status` (text and JSON), `runs`, `show`, `dead`,
`workers`, the metrics and every dashboard page, for tests that hold odd values in the database."""

from __future__ import annotations

import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from fleet.ops.dashboard.app import Dashboard
from fleet.ops.dashboard.config import settings_from
from fleet.ops.dashboard.server import DashboardServer
from fleet.ops.metrics import FleetCollector
from fleet.ops.targets import iso
from fleet.store.db import connect
from fleet.store.pool import make_pool
from tests.integration.ops_support import fleetctl, samples


@contextmanager
def dashboard_at(db_url: str) -> Iterator[str]:
    """A dashboard reading `db_url` on a free loopback port, while the block runs: its base URL."""
    settings = settings_from(
        listen="127.0.0.1:0", read_only=True, trace_url=None, refresh_s=3, threads=2, env={}
    )
    pool = make_pool(db_url, "fleet-tests readers", min_size=1, max_size=2)
    app = Dashboard(settings, pool)
    server = DashboardServer(("127.0.0.1", 0), app, 2, deadline_s=10.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        app.close()
        pool.close()


def get(base: str, path: str) -> tuple[int, str]:
    """(HTTP status, body) of a GET."""
    try:
        with urllib.request.urlopen(base + path, timeout=20) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def reader_failures(db_url: str, base: str, capsys: pytest.CaptureFixture[str]) -> list[tuple[object, ...]]:
    """Each reader that did not answer (fleetctl exit 2 or a traceback, metrics saying the database
    is down, a page other than 200), with what it said; every run's `show` and slot page is asked."""
    with connect(db_url, "fleet-tests readers") as conn:
        runs = [
            (r["schedule_name"], iso(r["scheduled_for"]) or "")
            for r in conn.execute("SELECT schedule_name, scheduled_for FROM fleet.job_runs ORDER BY 1, 2")
        ]
        schedules = [r["name"] for r in conn.execute("SELECT name FROM fleet.schedules ORDER BY 1")]
    commands: list[tuple[str, ...]] = [
        ("status",),
        ("status", "--json"),
        ("runs", "--all"),
        ("runs", "--all", "--json"),
        ("dead",),
        ("workers",),
    ]
    commands += [("show", name, slot) for name, slot in runs]
    commands += [("show", name, slot, "--json") for name, slot in runs[:1]]
    failed: list[tuple[object, ...]] = []
    for args in commands:
        code, _, err = fleetctl(capsys, db_url, *args)
        if code not in (0, 1) or "Traceback" in err:
            failed.append((args, code, err[-1000:]))
    scrape = samples(FleetCollector(db_url, settle_s=0).render().decode())
    if scrape[("fleet_database_up", ())] != 1:
        failed.append(("metrics", "fleet_database_up", scrape[("fleet_database_up", ())]))
    paths = ["/", "/?fragment=1", "/workers"]
    for name in schedules:
        quoted = urllib.parse.quote(name, safe="")
        paths += [f"/schedules/{quoted}", f"/schedules/{quoted}?fragment=1", f"/schedules/{quoted}/args.json"]
    paths += [
        f"/schedules/{urllib.parse.quote(name, safe='')}/slots/{urllib.parse.quote(slot, safe='')}"
        for name, slot in runs
    ]
    for path in paths:
        status, body = get(base, path)
        if status != 200:
            failed.append((path, status, body[:1000]))
    return failed
