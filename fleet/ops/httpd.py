"""What the dashboard and the metrics endpoint share as HTTP servers: credentials, with one strength
rule, compared in constant time; and a threaded server that bounds what a client can hold.

A client can hold a connection, never more than a deadline per phase: from its accept to the last
byte of its request (the TLS handshake included), then from the first to the last byte of the
response. A single thread cuts every connection whose deadline passed, TLS or not. Connections
are capped far above the work a server does at once, so clients that open connections and send
nothing, or a byte at a time, hold connections that expire, not the threads that answer others.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from fleet.errors import UsageError
from fleet.observe import logs

# A bearer token shorter than this is refused: it is the only secret between a port and anyone.
MIN_TOKEN_CHARS: Final = 16
# Connections held at once; one past it is closed at once (with a 503 when it is plain HTTP).
MAX_CONNECTIONS: Final = 256
# Seconds a client has to send its whole request, and then to read the whole response.
DEADLINE_S: Final = 10.0
BACKLOG: Final = 128
_BUSY: Final = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n"


@dataclass(frozen=True)
class Credentials:
    """What a request must carry when credentials are configured (either one will do)."""

    token: str | None = None  # `Authorization: Bearer TOKEN`
    basic: tuple[str, str] | None = None  # `Authorization: Basic` user and password

    @property
    def any(self) -> bool:
        return self.token is not None or self.basic is not None

    def allows(self, authorization: str | None) -> bool:
        """Whether a request with this `Authorization` header may pass (always, without credentials)."""
        if not self.any:
            return True
        scheme, _, value = (authorization or "").partition(" ")
        value = value.strip()
        if self.token is not None and scheme.lower() == "bearer":
            return hmac.compare_digest(value.encode(), self.token.encode())
        if self.basic is not None and scheme.lower() == "basic":
            try:
                given = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return False
            return hmac.compare_digest(given, f"{self.basic[0]}:{self.basic[1]}".encode())
        return False


def credentials_from(env: Mapping[str, str], token_var: str, basic_var: str) -> Credentials:
    """The credentials in `env`; UsageError naming the variable when a token has fewer than
    MIN_TOKEN_CHARS characters, or basic auth is not USER:PASSWORD with neither part empty."""
    token = env.get(token_var) or None
    basic_text = env.get(basic_var) or None
    basic: tuple[str, str] | None = None
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UsageError(f"{token_var}: at least {MIN_TOKEN_CHARS} characters")
    if basic_text is not None:
        user, sep, password = basic_text.partition(":")
        if not sep or not user or not password:
            raise UsageError(f"{basic_var}: expected USER:PASSWORD, neither of them empty")
        basic = (user, password)
    return Credentials(token=token, basic=basic)


class Deadlines:
    """Each watched connection's deadline, and one thread that cuts a connection once it passes.

    A cut shuts the socket down at the operating system's level, which ends whatever read or write
    its thread is blocked in; the socket is closed by its own thread, after `unwatch`, so a cut can
    never reach a later connection that reuses its file descriptor."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._due: dict[socket.socket, float] = {}
        self._cut: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, seconds: float) -> None:
        """Cut `sock` `seconds` from now (replacing an earlier deadline)."""
        with self._lock:
            if sock in self._cut:
                return
            self._due[sock] = time.monotonic() + seconds
            self._lock.notify()

    def replace(self, old: socket.socket, wrap: Callable[[], socket.socket]) -> socket.socket:
        """The socket `wrap` makes of `old` (a TLS socket takes over its file descriptor), watched
        in its place with the same deadline."""
        with self._lock:
            new = wrap()
            due = self._due.pop(old, None)
            if due is not None:
                self._due[new] = due
            if old in self._cut:
                self._cut.discard(old)
                self._cut.add(new)
            return new

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock:
            self._due.pop(sock, None)
            self._cut.discard(sock)

    def was_cut(self, sock: socket.socket) -> bool:
        with self._lock:
            return sock in self._cut

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join(5)

    def _run(self) -> None:
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                for sock in [s for s, due in self._due.items() if due <= now]:
                    del self._due[sock]
                    self._cut.add(sock)
                    with contextlib.suppress(OSError):
                        # socket.socket's own shutdown, also for a TLS socket: SSLSocket.shutdown
                        # would drop the TLS state another thread is reading with
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                self._lock.wait(min(self._due.values(), default=now + 60.0) - now)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them, each cut at its deadline
    (`deadline_s` for the request, then as much for the response), served over TLS when `tls`
    is given. Handlers call `respond` before writing their response."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        max_connections: int = MAX_CONNECTIONS,
        deadline_s: float = DEADLINE_S,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)
        self.tls = tls
        self.deadline_s = deadline_s
        self.deadlines = Deadlines()
        self._connections = threading.BoundedSemaphore(max_connections)

    def respond(self, sock: socket.socket) -> bool:
        """The response starts: its own deadline begins. False when the connection was cut (its
        request may be incomplete: answer nothing)."""
        if self.deadlines.was_cut(sock):
            return False
        self.deadlines.watch(sock, self.deadline_s)
        return True

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._connections.acquire(blocking=False):
            if self.tls is None:  # on a TLS port, bytes in the clear would only confuse the client
                with contextlib.suppress(OSError):
                    request.setblocking(False)
                    request.send(_BUSY)
            self.shutdown_request(request)
            return
        # the request's deadline runs from its accept, before its thread starts
        self.deadlines.watch(request, self.deadline_s)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.deadlines.unwatch(request)
            self._connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(self.deadline_s)  # a bound per read or write too
            if self.tls is not None:
                tls = self.tls
                request = self.deadlines.replace(
                    request, lambda: tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                )
                request.do_handshake()
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - reported by handle_error, like socketserver's own
            self.handle_error(request, client_address)
        finally:
            self.deadlines.unwatch(request)
            self.shutdown_request(request)
            self._connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke, timed out or was cut is the client's affair; anything else is
        logged as one event, never printed as a traceback."""
        e = sys.exc_info()[1]
        if e is None or isinstance(e, OSError):
            return
        logs.event("http_error", error=logs.error_text(e))

    def server_close(self) -> None:
        super().server_close()
        self.deadlines.close()
