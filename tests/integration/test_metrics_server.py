"""The metrics endpoint bounds what a client can hold and reads the database once per interval,
however many scrapes come; it can require credentials and serve TLS."""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fleet.ops.httpd import MAX_CONNECTIONS, Credentials
from fleet.ops.metrics import FleetCollector
from fleet.ops.metrics_server import Exposition, MetricsServer, tls_context
from tests.slow_clients import SlowClients
from tests.support import apply_text, live_ticker, wait_for

OPEN = Credentials()


@contextlib.contextmanager
def serving(
    db_url: str,
    access: Credentials = OPEN,
    tls: ssl.SSLContext | None = None,
    max_connections: int = MAX_CONNECTIONS,
    deadline_s: float = 2.0,
    interval_s: float = 60.0,
) -> Iterator[tuple[str, Exposition]]:
    collector = FleetCollector(db_url, settle_s=0)
    exposition = Exposition(collector.parts, interval_s)
    stop = threading.Event()
    refresher = threading.Thread(target=exposition.refresh_forever, args=(stop,), daemon=True)
    refresher.start()
    server = MetricsServer(("127.0.0.1", 0), exposition, access, tls, max_connections, deadline_s)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}/metrics", exposition
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
        refresher.join(5)


def get(
    url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def half_sent(url: str, n: int) -> list[socket.socket]:
    """`n` connections that send the start of a request and then nothing."""
    port = int(url.split(":")[2].split("/")[0])
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metr")
        socks.append(s)
    return socks


@pytest.fixture
def schedules(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\n')
    live_ticker(conn)


@pytest.mark.usefixtures("schedules")
def test_abandoned_half_requests_do_not_delay_a_scrape(db_url: str) -> None:
    with serving(db_url, deadline_s=30) as (url, _):
        socks = half_sent(url, 10)
        try:
            started = time.monotonic()
            status, body = get(url)
            assert status == 200 and b'fleet_schedule_healthy{schedule="s"} 1.0' in body
            assert time.monotonic() - started < 2.0
        finally:
            for s in socks:
                s.close()


@pytest.mark.usefixtures("schedules")
def test_connections_past_the_limit_get_503_and_a_request_has_a_deadline(db_url: str) -> None:
    with serving(db_url, max_connections=3, deadline_s=1.0) as (url, _):
        socks = half_sent(url, 3)
        try:
            time.sleep(0.2)
            assert get(url)[0] == 503  # every slot is held
            started = time.monotonic()
            for s in socks:  # the deadline cuts the three off: the server closes them
                s.settimeout(5)
                with contextlib.suppress(ConnectionResetError):
                    assert s.recv(1024) == b""
            assert time.monotonic() - started < 3
            time.sleep(0.2)  # the slots are released once each handler thread ends
            assert get(url)[0] == 200
        finally:
            for s in socks:
                s.close()


@pytest.mark.usefixtures("schedules")
def test_concurrent_scrapes_share_one_database_read(db_url: str) -> None:
    with serving(db_url, interval_s=60) as (url, exposition):
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(get(url)[0])) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert results == [200] * 12
        assert exposition.computed == 1


@pytest.mark.usefixtures("schedules")
def test_credentials_when_configured(db_url: str) -> None:
    with serving(db_url, access=Credentials(basic=("prom", "s3cret"), token="tok-123")) as (url, _):
        assert get(url)[0] == 401
        wrong = base64.b64encode(b"prom:nope").decode()
        assert get(url, {"Authorization": f"Basic {wrong}"})[0] == 401
        right = base64.b64encode(b"prom:s3cret").decode()
        assert get(url, {"Authorization": f"Basic {right}"})[0] == 200
        assert get(url, {"Authorization": "Bearer tok-12"})[0] == 401
        assert get(url, {"Authorization": "Bearer tok-123"})[0] == 200


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return str(cert), str(key)


@pytest.mark.usefixtures("schedules")
def test_tls(db_url: str, cert: tuple[str, str]) -> None:
    client = ssl.create_default_context(cafile=cert[0])
    with serving(db_url, tls=tls_context(*cert)) as (url, _):
        status, body = get(url, context=client)
        assert status == 200 and b"fleet_database_up 1.0" in body
        with pytest.raises(OSError):  # plain HTTP gets no answer but a closed connection
            get(url.replace("https://", "http://"))


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


@pytest.mark.usefixtures("schedules")
def test_slow_tls_clients_are_cut_at_the_deadline_and_never_delay_a_scrape(
    db_url: str, cert: tuple[str, str]
) -> None:
    client = ssl.create_default_context(cafile=cert[0])
    with serving(db_url, tls=tls_context(*cert), deadline_s=3.0) as (url, _):
        assert get(url, context=client)[0] == 200  # the first exposition is computed
        # 48 clients send a request a byte at a time (each read is quick: only a deadline on the
        # whole request cuts them), 16 never start their handshake
        slow = SlowClients(port_of(url), dribbling=48, idle=16, tls=client)
        try:
            for _ in range(3):
                started = time.monotonic()
                status, body = get(url, context=client)
                assert status == 200 and b'fleet_schedule_healthy{schedule="s"} 1.0' in body
                assert time.monotonic() - started < 1.0
            held = slow.wait_all_cut(timeout_s=10)
            assert len(held) == 64, f"{64 - len(held)} slow connections were never cut"
            assert all(2.5 < s < 5.5 for s in held.values()), sorted(held.values())
        finally:
            slow.close()


@pytest.mark.usefixtures("schedules")
def test_a_tls_port_past_its_connection_limit_closes_without_a_plaintext_answer(
    db_url: str, cert: tuple[str, str]
) -> None:
    client = ssl.create_default_context(cafile=cert[0])
    with serving(db_url, tls=tls_context(*cert), max_connections=2, deadline_s=2.0) as (url, _):
        slow = SlowClients(port_of(url), dribbling=0, idle=2)
        try:
            extra = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
            with extra:
                extra.sendall(b"\x16\x03\x01")  # the start of a TLS ClientHello
                received = b""
                with contextlib.suppress(ConnectionResetError):
                    while chunk := extra.recv(1024):
                        received += chunk
                assert received == b""  # closed, with no byte in the clear
            assert len(slow.wait_all_cut(timeout_s=10)) == 2
        finally:
            slow.close()
        # their threads end and free the two connections
        wait_for(lambda: _status(url, client) == 200, timeout=10, what="a scrape once the two were cut")


def _status(url: str, context: ssl.SSLContext) -> int | None:
    try:
        return get(url, context=context)[0]
    except OSError:
        return None
