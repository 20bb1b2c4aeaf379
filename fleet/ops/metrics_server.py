"""The HTTP side of `fleetctl metrics`: a bounded server handing every scrape the latest exposition.

The exposition is computed from the database at most once per interval, by one thread, and shared by
every scrape in between: however many scrapers, retries or dashboards ask, the database sees one
health query per interval, and a scrape is answered from memory. The server bounds what a client
can hold (fleet.ops.httpd): a connection, cut at a deadline for its request and another for its
response, TLS included; connections past the limit are closed at once; no keep-alive.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from fleet.observe import logs
from fleet.ops.httpd import DEADLINE_S, MAX_CONNECTIONS, BoundedHTTPServer, Credentials

DEFAULT_INTERVAL_S = 15.0
REQUEST_DEADLINE_S = DEADLINE_S  # for the request, from accept; then as much for the response


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


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.0"  # one request per connection

    def do_GET(self) -> None:
        if not self.server.credentials.allows(self.headers.get("Authorization")):
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
        if not self.server.respond(self.connection):
            return  # cut at its deadline: the request may be incomplete
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


class MetricsServer(BoundedHTTPServer):
    """The metrics endpoint: a bounded HTTP server (see fleet.ops.httpd) answering from memory."""

    def __init__(
        self,
        address: tuple[str, int],
        exposition: Exposition,
        credentials: Credentials,
        tls: ssl.SSLContext | None = None,
        max_connections: int = MAX_CONNECTIONS,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        super().__init__(address, _Handler, max_connections=max_connections, deadline_s=deadline_s, tls=tls)
        self.exposition = exposition
        self.credentials = credentials


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context for `cert` and `key` (PEM files); OSError or ssl.SSLError when unreadable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
