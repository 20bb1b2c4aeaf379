"""The HTTP side of `fleetctl metrics`: a bounded server handing every scrape the latest exposition.

The exposition is computed from the database at most once per interval, by one thread, and shared by
every scrape in between: however many scrapers, retries or dashboards ask, the database sees one
health query per interval, and a scrape is answered from memory. The server bounds what a client
can hold: a few connections at once (more get 503 at once), a deadline per request (a client that
sends half a request is cut off), no keep-alive.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fleet import logs

DEFAULT_INTERVAL_S = 15.0
MAX_CONNECTIONS = 16
REQUEST_DEADLINE_S = 10.0  # from accept to the last byte sent
BACKLOG = 128


# The Prometheus text format's media type.
CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"


class Exposition:
    """The latest scrape text, recomputed by `refresh_forever` every `interval_s`.

    `render` gives the text in parts, sent one after the other: they are never joined, so a family
    whose samples did not change is the collector's own bytes, not a copy of them (at 100,000
    schedules the text is over 100 MB)."""

    def __init__(self, render: Callable[[], Sequence[bytes]], interval_s: float) -> None:
        self.render = render
        self.interval_s = interval_s
        self._ready = threading.Condition()
        self._body: tuple[bytes, ...] | None = None
        self.computed = 0  # how many times the database was read (tests and logs)

    def refresh(self) -> None:
        body = tuple(self.render())
        with self._ready:
            self._body = body
            self.computed += 1
            self._ready.notify_all()

    def refresh_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.refresh()
            except Exception as e:  # noqa: BLE001 - a failed refresh keeps the previous text
                logs.event("metrics_refresh_failed", error=str(e).strip()[:300])
            stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def latest(self, timeout: float) -> tuple[bytes, ...] | None:
        """The latest text's parts; waits up to `timeout` for the first one."""
        with self._ready:
            self._ready.wait_for(lambda: self._body is not None, timeout)
            return self._body


@dataclass(frozen=True)
class Access:
    """Who may scrape: anyone, or a client with these basic-auth credentials or bearer token."""

    basic: str | None = None  # "user:password"
    token: str | None = None

    @property
    def open(self) -> bool:
        return self.basic is None and self.token is None

    def allows(self, header: str | None) -> bool:
        if self.open:
            return True
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() == "basic" and self.basic is not None:
            try:
                given = base64.b64decode(value, validate=True)
            except ValueError:
                return False
            return hmac.compare_digest(given, self.basic.encode())
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(value.encode(), self.token.encode())
        return False


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.0"  # one request per connection
    timeout = REQUEST_DEADLINE_S  # each read or write; the whole request has its own deadline too

    def do_GET(self) -> None:
        if not self.server.access.allows(self.headers.get("Authorization")):
            self._send(401, b"authentication required\n", [("WWW-Authenticate", 'Basic realm="fleet"')])
            return
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self._send(404, b"not found: try /metrics\n")
            return
        body = self.server.exposition.latest(timeout=self.server.deadline_s / 2)
        if body is None:
            self._send(503, b"no scrape computed yet\n")
            return
        self._send(200, body, [("Content-Type", CONTENT_TYPE_LATEST)])

    def _send(
        self,
        code: int,
        body: bytes | Sequence[bytes],
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        parts = (body,) if isinstance(body, bytes) else body
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        if not any(name == "Content-Type" for name, _ in headers):
            self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(sum(map(len, parts))))
        self.end_headers()
        for part in parts:
            self.wfile.write(part)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # scrapes are not events


class MetricsServer(ThreadingHTTPServer):
    """A threaded HTTP server with a connection limit and a deadline per request."""

    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        exposition: Exposition,
        access: Access,
        tls: ssl.SSLContext | None = None,
        max_connections: int = MAX_CONNECTIONS,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        self.exposition = exposition
        self.access = access
        self.tls = tls
        self.slots = threading.BoundedSemaphore(max_connections)
        self.deadline_s = deadline_s

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # The deadline covers the TLS handshake and a client that trickles its request.
        deadline = threading.Timer(self.deadline_s, _cut, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            if self.tls is not None:
                request.settimeout(self.deadline_s)
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self.slots.release()


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context for `cert` and `key` (PEM files); OSError or ssl.SSLError when unreadable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
