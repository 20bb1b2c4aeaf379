"""The dashboard's server over real sockets: slow or idle clients are cut at a deadline on their
whole request and never keep a legitimate request from an answer, and no page grows with the size
of the values the database holds."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest

from fleet.ops.dashboard.app import Dashboard
from fleet.ops.dashboard.config import settings_from
from fleet.ops.dashboard.server import DashboardServer
from fleet.ops.targets import iso
from fleet.store.pool import make_pool
from tests.slow_clients import SlowClients
from tests.support import apply_text, live_ticker

THREADS = 2


@pytest.fixture
def dashboard(db_url: str, conn: psycopg.Connection[Any]) -> Iterator[DashboardServer]:
    """A dashboard on a free loopback port answering with THREADS threads, cut at 3 s."""
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\n')
    live_ticker(conn)
    settings = settings_from(
        listen="127.0.0.1:0",
        read_only=False,
        trace_url=None,
        refresh_s=3,
        threads=THREADS,
        env={},
        local_actions=True,
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


BIG = "x" * 60_000  # near the 64 KiB args limit, once encoded


def test_pages_stay_bounded_however_large_args_and_errors_are(
    dashboard: DashboardServer, conn: psycopg.Connection[Any]
) -> None:
    """200 dead runs with 60 KB args of their own and 4,000-character errors, 10 attempts each
    (2,000 on the timeline), and a slot with 300 attempts: every page stays under 1.5 MB (it was
    over 12 MB), and each run's full args are a link away."""
    conn.execute(
        "UPDATE fleet.schedules SET args = jsonb_build_object('big', %s::text) WHERE name = 's'", (BIG,)
    )
    error = "E" * 4000
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, status, attempts, run_after, "
        "finished_at, last_error) SELECT 's', now() - make_interval(hours => g), 'noop', "
        "jsonb_build_object('n', g, 'big', %s::text), 'dead', 10, now(), now(), %s "
        "FROM generate_series(1, 200) g",
        (BIG, error),
    )
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, "
        "finished_at, outcome, error) SELECT schedule_name, scheduled_for, a, 'w' || (a %% 3), "
        "scheduled_for + make_interval(secs => a), scheduled_for + make_interval(secs => a + 1), 'failed', %s "
        "FROM fleet.job_runs, generate_series(1, 10) a",
        (error,),
    )
    slot = conn.execute("SELECT max(scheduled_for) AS s FROM fleet.job_runs").fetchone()["s"]  # type: ignore[index]
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at, "
        "finished_at, outcome, error) SELECT 's', %s, a, 'w', %s, %s, 'failed', %s FROM generate_series(11, 300) a",
        (slot, slot, slot, error),
    )
    slot_path = f"/schedules/s/slots/{iso(slot)}"
    sizes = {}
    for path in (
        "/",
        "/?fragment=1",
        "/schedules/s?limit=200",
        "/schedules/s?limit=200&fragment=1",
        slot_path,
    ):
        status, body = get(dashboard, path)
        assert status == 200, body[:300]
        sizes[path] = len(body)
    assert max(sizes.values()) < 1_500_000, sizes
    page = get(dashboard, "/schedules/s?limit=200")[1].decode()
    assert page.count("more characters]") >= 200 and 'class="full-args"' in page
    assert page.count(BIG[:2001]) == 0  # no value is shown whole
    slot_page = get(dashboard, slot_path)[1].decode()
    assert "200 earlier attempt(s) not shown" in slot_page
    status, full = get(dashboard, slot_path + "/args.json")
    assert status == 200 and orjson.loads(full)["big"] == BIG
    status, full = get(dashboard, "/schedules/s/args.json")
    assert status == 200 and orjson.loads(full) == {"big": BIG}


def test_only_attempts_that_were_traced_link_to_a_trace(
    dashboard: DashboardServer, conn: psycopg.Connection[Any]
) -> None:
    """Every claim records trace ids; only those whose worker exported a span link to Jaeger, and
    a slot none of whose attempts were traced offers no Jaeger search."""
    slots = []
    for hours, traced in ((1, (True, False)), (2, (False, False))):
        row = conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, "
            "finished_at) VALUES ('s', date_trunc('second', now()) - make_interval(hours => %s), 'noop', "
            "'done', 2, now(), now()) RETURNING scheduled_for",
            (hours,),
        ).fetchone()
        assert row is not None
        slots.append(row["scheduled_for"])
        for n, t in enumerate(traced, 1):
            conn.execute(
                "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, "
                "started_at, finished_at, outcome, trace_id, span_id, traced) "
                "VALUES ('s', %s, %s, 'w', now(), now(), 'done', %s, %s, %s)",
                (row["scheduled_for"], n, f"{hours}{n}" * 16, f"{n}" * 16, t),
            )
    page = get(dashboard, f"/schedules/s/slots/{iso(slots[0])}")[1].decode()
    assert re.findall(r'class="trace" href="[^"]*/trace/([0-9a-f]+)"', page) == ["11" * 16]
    assert page.count('class="no-trace"') == 1 and "Every attempt's trace in Jaeger" in page
    page = get(dashboard, f"/schedules/s/slots/{iso(slots[1])}")[1].decode()
    assert 'class="trace"' not in page and page.count('class="no-trace"') == 2
    assert "Every attempt's trace in Jaeger" not in page


@pytest.mark.parametrize(
    "path",
    [
        "/schedules/s/slots/0001-01-01T00:00:00%2B01:00",
        "/schedules/s/slots/9999-12-31T23:59:59-01:00",
        "/schedules/s/slots/0001-01-01T00:00:00%2B01:00/args.json",
        "/schedules/s?before=0001-01-01T00:00:00%2B05:00",
        "/schedules/s?before=9999-12-31T23:00:00-02:00&fragment=1",
    ],
)
def test_times_out_of_range_in_utc_get_a_400_page(dashboard: DashboardServer, path: str) -> None:
    status, body = get(dashboard, path)
    assert status == 400 and b"out of range in UTC" in body, (status, body[:300])
