"""Clients that hold a server's connections: some send nothing, the others a request a byte at a
time that never ends. Each is watched until the server cuts it, and when that happened is kept."""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time

# A request head that never ends: a byte of it goes out every `every_s`.
_ENDLESS = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000


def _closed(s: socket.socket) -> bool:
    """Whether the server closed `s`, which select() found readable: EOF, a reset or a TLS error
    (not a TLS record such as a session ticket, which carries no data)."""
    s.setblocking(False)
    try:
        return s.recv(1024) == b""
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return False
    except OSError:
        return True
    finally:
        s.settimeout(5)


class SlowClients:
    """`dribbling` connections sending a request a byte at a time and `idle` ones sending nothing,
    to 127.0.0.1:`port` (over TLS with `tls`: the dribbling ones complete their handshake first,
    the idle ones never start it). A dribbling one sends `prefix` at once, then the rest of its
    request a byte at a time. A thread keeps them going for at most `limit_s`."""

    def __init__(
        self,
        port: int,
        dribbling: int,
        idle: int = 0,
        tls: ssl.SSLContext | None = None,
        every_s: float = 0.2,
        limit_s: float = 30.0,
        prefix: bytes = b"",
    ) -> None:
        self.opened: dict[socket.socket, float] = {}
        self.cut: dict[socket.socket, float] = {}
        self._sent: dict[socket.socket, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        for _ in range(idle):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            self.opened[s] = time.monotonic()
        for _ in range(dribbling):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if tls is not None:
                s = tls.wrap_socket(s, server_hostname="127.0.0.1")
            s.sendall(prefix)
            self.opened[s] = time.monotonic()
            self._sent[s] = 0
        self.every_s = every_s
        self.limit_s = limit_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end = time.monotonic() + self.limit_s
        while not self._stop.is_set() and time.monotonic() < end:
            with self._lock:
                live = [s for s in self.opened if s not in self.cut]
                if not live:
                    return
                readable, _, _ = select.select(live, [], [], 0)
                for s in readable:
                    if _closed(s):
                        self.cut[s] = time.monotonic()
                for s, n in list(self._sent.items()):
                    if s in self.cut:
                        continue
                    try:
                        s.sendall(_ENDLESS[n % len(_ENDLESS) : n % len(_ENDLESS) + 1])
                        self._sent[s] = n + 1
                    except OSError:
                        self.cut[s] = time.monotonic()
            self._stop.wait(self.every_s)

    def wait_all_cut(self, timeout_s: float) -> dict[socket.socket, float]:
        """Seconds from each connection's open to its cut, once every one was cut (or the timeout
        passed: those not cut are missing)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self._lock:
                if len(self.cut) == len(self.opened):
                    break
            time.sleep(0.05)
        with self._lock:
            return {s: self.cut[s] - self.opened[s] for s in self.cut}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self.opened:
            s.close()
