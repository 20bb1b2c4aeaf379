"""The dashboard's HTTP server: a bounded server (fleet.ops.httpd) that reads each request whole,
under its deadline, before it takes one of the few threads that answer (and hold a database
connection); one connection per request (no keep-alive to hold a thread)."""

from __future__ import annotations

import email.message
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any, Final

from fleet.ops.httpd import DEADLINE_S, MAX_CONNECTIONS, BoundedHTTPServer

from .app import SECURITY_HEADERS, Dashboard, Request, Response

MAX_BODY: Final = 16 * 1024
# A request read whole that finds every answering thread busy waits this long for one, then is
# answered 503.
WAIT_FOR_THREAD_S: Final = 2.0


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "fleet-dashboard"
    sys_version = ""

    def do_GET(self) -> None:
        self._serve("GET", {})

    def do_HEAD(self) -> None:
        self._serve("GET", {}, head=True)

    def do_POST(self) -> None:
        length_text = self.headers.get("Content-Length") or "0"
        if not length_text.isdigit():
            self._send(Response(400, b"Content-Length: not a number\n", "text/plain; charset=utf-8"))
            return
        length = int(length_text)
        if length > MAX_BODY:
            self._send(Response(413, b"request body too large\n", "text/plain; charset=utf-8"))
            return
        body = self.rfile.read(length)
        if len(body) != length:
            return  # the client stopped sending, or was cut at its deadline: nothing to answer
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        form: dict[str, str] = {}
        if ctype == "application/x-www-form-urlencoded":
            try:
                pairs = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=20)
            except (UnicodeDecodeError, ValueError):
                self._send(Response(400, b"form: not readable\n", "text/plain; charset=utf-8"))
                return
            form = dict(pairs)
        self._serve("POST", form)

    def _serve(self, method: str, form: dict[str, str], head: bool = False) -> None:
        if self.server.deadlines.was_cut(self.connection):
            return  # its headers may be incomplete: answer nothing
        url = urllib.parse.urlsplit(self.path)
        try:
            query = dict(urllib.parse.parse_qsl(url.query, max_num_fields=20))
        except ValueError:
            self._send(Response(400, b"query: too many fields\n", "text/plain; charset=utf-8"), head)
            return
        headers: email.message.Message = self.headers
        req = Request(method, url.path or "/", query, headers, form)  # type: ignore[arg-type]
        # The request is read whole: only now does it take an answering thread, for the time it
        # takes to compute the response, not the time the client takes to send or read.
        if not self.server.answering.acquire(timeout=WAIT_FOR_THREAD_S):
            busy = Response(503, b"busy: try again\n", "text/plain; charset=utf-8", {"Retry-After": "1"})
            self._send(busy, head)
            return
        try:
            response = self.server.app.handle(req)
        finally:
            self.server.answering.release()
        self._send(response, head)

    def _send(self, r: Response, head: bool = False) -> None:
        if not self.server.respond(self.connection):
            return
        self.send_response(r.status)
        for k, v in {**SECURITY_HEADERS, "Content-Type": r.content_type, **r.headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(r.body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(r.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Requests are not logged line by line (the dashboard polls); errors still are."""


class DashboardServer(BoundedHTTPServer):
    """At most `threads` requests answered at once, among up to `max_connections` connections
    that may be sending their request or reading their response."""

    def __init__(
        self,
        address: tuple[str, int],
        app: Dashboard,
        threads: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        deadline_s: float = DEADLINE_S,
    ) -> None:
        self.app = app
        self.answering = threading.BoundedSemaphore(threads)
        super().__init__(address, Handler, max_connections=max_connections, deadline_s=deadline_s)
