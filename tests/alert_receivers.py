"""Real receivers of alerts on loopback: an HTTP server recording each POST, and an SMTP server
(aiosmtpd) recording each message. Either can be started late, on a port chosen beforehand, to be
a receiver that is down at first."""

from __future__ import annotations

import email
import email.policy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from aiosmtpd.controller import Controller

from tests.support import free_port


@dataclass(frozen=True)
class Posted:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that answers 200 to every POST and keeps it; `status` changes the
    answer (a receiver that refuses), `delay_s` slows each answer."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.posts: list[Posted] = []
        self.status = 200
        self.delay_s = 0.0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.delay_s:
                    threading.Event().wait(receiver.delay_s)
                status = receiver.status
                if status == 200:
                    with receiver.lock:
                        receiver.posts.append(Posted(self.path, dict(self.headers.items()), body))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.thread is not None:
            self.thread.join(10)
            self.thread = None

    def received(self) -> list[Any]:
        with self.lock:
            return [p.json for p in self.posts]


class _Handler:
    def __init__(self, box: SmtpReceiver) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        with self.box.lock:
            self.box.messages.append((list(envelope.rcpt_tos), msg))
        return "250 OK"


class SmtpReceiver:
    """An SMTP server (aiosmtpd) on 127.0.0.1 keeping every message with its recipients."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self.lock = threading.Lock()
        self.controller: Controller | None = None

    def start(self) -> None:
        self.controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def received(self) -> list[tuple[list[str], EmailMessage]]:
        with self.lock:
            return list(self.messages)


@contextmanager
def receivers(start: bool = True) -> Iterator[tuple[WebhookReceiver, SmtpReceiver]]:
    """A webhook and an SMTP receiver (started unless `start` is false), stopped at the end."""
    hook, smtp = WebhookReceiver(), SmtpReceiver()
    try:
        if start:
            hook.start()
            smtp.start()
        yield hook, smtp
    finally:
        hook.stop()
        smtp.stop()
