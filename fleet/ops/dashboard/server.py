"""The dashboard's HTTP server: the standard library's, with a bounded number of request threads,
socket timeouts, small request bodies, and one connection per request (no keep-alive to hold a
thread)."""

from __future__ import annotations

import contextlib
import email.message
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from .app import SECURITY_HEADERS, Dashboard, Request, Response

MAX_BODY: Final = 16 * 1024
SOCKET_TIMEOUT_S: Final = 10.0
# A request that finds every thread busy waits this long for one, then is answered 503.
WAIT_FOR_THREAD_S: Final = 2.0


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    timeout = SOCKET_TIMEOUT_S
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
        url = urllib.parse.urlsplit(self.path)
        try:
            query = dict(urllib.parse.parse_qsl(url.query, max_num_fields=20))
        except ValueError:
            self._send(Response(400, b"query: too many fields\n", "text/plain; charset=utf-8"), head)
            return
        headers: email.message.Message = self.headers
        req = Request(method, url.path or "/", query, headers, form)  # type: ignore[arg-type]
        self._send(self.server.app.handle(req), head)

    def _send(self, r: Response, head: bool = False) -> None:
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


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], app: Dashboard, threads: int) -> None:
        self.app = app
        self._slots = threading.BoundedSemaphore(threads)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(timeout=WAIT_FOR_THREAD_S):
            with contextlib.suppress(OSError):
                request.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n"
                )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
