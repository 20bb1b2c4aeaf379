"""The dashboard's server over real sockets: slow or idle clients are cut at a deadline on their
whole request and never keep a legitimate request from an answer."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fleet.ops.dashboard.app import Dashboard
from fleet.ops.dashboard.config import settings_from
from fleet.ops.dashboard.server import DashboardServer
from fleet.pool import make_pool
from tests.slow_clients import SlowClients
from tests.support import apply_text, live_ticker

THREADS = 2


@pytest.fixture
def dashboard(db_url: str, conn: psycopg.Connection[Any]) -> Iterator[DashboardServer]:
    """A dashboard on a free loopback port answering with THREADS threads, cut at 3 s."""
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\n')
    live_ticker(conn)
    settings = settings_from(
        listen="127.0.0.1:0", read_only=False, trace_url=None, refresh_s=3, threads=THREADS, env={}
    )
    pool = make_pool(db_url, "dashboard-test", min_size=1, max_size=THREADS)
    app = Dashboard(settings, pool)
    server = DashboardServer(("127.0.0.1", 0), app, THREADS, deadline_s=3.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        app.close()
        pool.close()


def get(server: DashboardServer, path: str) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_slow_and_idle_clients_are_cut_at_the_deadline_and_never_starve_a_request(
    dashboard: DashboardServer,
) -> None:
    port = int(dashboard.server_address[1])
    post_head = (
        b"POST /schedules/s/pause HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\n"
    )
    # headers a byte at a time, a body a byte at a time, and connections that send nothing: every
    # read is quick, so only a deadline on the whole request cuts them
    heads = SlowClients(port, dribbling=32, idle=16)
    bodies = SlowClients(port, dribbling=16, prefix=post_head)
    try:
        for path in ("/", "/schedules/s", "/workers"):
            started = time.monotonic()
            status, body = get(dashboard, path)
            assert status == 200, body[:300]
            assert time.monotonic() - started < 1.0
        held = {**heads.wait_all_cut(timeout_s=10), **bodies.wait_all_cut(timeout_s=10)}
        assert len(held) == 64, f"{64 - len(held)} slow connections were never cut"
        assert all(2.5 < s < 5.5 for s in held.values()), sorted(held.values())
    finally:
        heads.close()
        bodies.close()
    assert get(dashboard, "/")[0] == 200


def test_a_request_cut_mid_body_is_not_acted_on(
    dashboard: DashboardServer, conn: psycopg.Connection[Any]
) -> None:
    """A form cut at the deadline is incomplete: what arrived of it (here a valid pause, with its
    token) is not carried out."""
    port = int(dashboard.server_address[1])
    page = get(dashboard, "/schedules/s")[1].decode()
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None
    head = (
        f"POST /schedules/s/pause HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000\r\n\r\n"
        f"csrf={token.group(1)}&note="
    ).encode()
    slow = SlowClients(port, dribbling=1, prefix=head)
    try:
        assert len(slow.wait_all_cut(timeout_s=10)) == 1
    finally:
        slow.close()
    row = conn.execute("SELECT paused_at FROM fleet.schedules WHERE name = 's'").fetchone()
    assert row is not None and row["paused_at"] is None
