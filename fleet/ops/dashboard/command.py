"""`fleetctl dashboard`: serve the dashboard until stopped; `fleetctl up` starts one beside its live view."""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable
from typing import Any

from fleet.errors import UsageError
from fleet.ops.connection import require_schema
from fleet.process.signals import on_stop_signal
from fleet.store.db import connect, resolve_url
from fleet.store.pool import make_pool

from .config import (
    DEFAULT_LISTEN,
    DEFAULT_REFRESH_S,
    DEFAULT_THREADS,
    ENV_BASIC,
    ENV_JAEGER,
    ENV_LISTEN,
    ENV_TOKEN,
    ENV_TRACE_URL,
    DashboardSettings,
    settings_from,
)


class RunningDashboard:
    """A dashboard serving on a thread of this process, with its own bounded connection pool."""

    def __init__(self, settings: DashboardSettings, url: str) -> None:
        # imported here: the other fleetctl commands do without the web stack
        from .app import Dashboard
        from .server import DashboardServer

        self.settings = settings
        self.pool = make_pool(url, "fleetctl dashboard", min_size=1, max_size=settings.threads)
        self.app = Dashboard(settings, self.pool)
        try:
            self.server = DashboardServer((settings.host, settings.port), self.app, settings.threads)
        except OSError as e:
            self.app.close()
            self.pool.close()
            where = f"{settings.host}:{settings.port}"
            raise UsageError(f"--listen: cannot listen on {where}: {e.strerror}") from None
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.5}, name="dashboard", daemon=True
        )
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = str(self.server.server_address[0]), int(self.server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def describe(self) -> str:
        """The address, and what an operator may do there."""
        if self.settings.read_only:
            return f"{self.address} (read-only: {self.settings.read_only_reason})"
        if not self.settings.credentials.any:
            return f"{self.address} (no credentials: every local user may act)"
        return self.address

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        self.app.close()
        self.pool.close()


def cmd_dashboard(args: argparse.Namespace) -> int:
    settings = settings_from(
        listen=args.listen,
        read_only=args.read_only,
        local_actions=args.local_actions,
        trace_url=args.trace_url,
        refresh_s=args.refresh,
        threads=args.threads,
        env=os.environ,
    )
    url = resolve_url(args.database_url or os.environ.get("FLEET_DATABASE_URL") or None)
    with connect(url, "fleetctl dashboard") as conn:
        require_schema(conn)
    stop = threading.Event()
    restore = on_stop_signal(lambda _sig: stop.set())
    try:
        running = RunningDashboard(settings, url)
        try:
            print(f"fleetctl dashboard: serving {running.describe()}; Ctrl-C stops it", flush=True)
            while not stop.wait(1.0):
                pass
        finally:
            running.stop()
    finally:
        restore()
    return 0


def add_commands(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "dashboard",
        help="a web dashboard: every schedule's health, timelines of attempts, repairs",
        description=(
            "Serves server-rendered pages that update themselves: the overview of every schedule's verdict, "
            "a schedule's timeline (one lane per worker) with Retry, Discard, Trigger, Pause and Resume, one "
            "slot's attempts with their traces, and the live processes. Actions need credentials: "
            f"{ENV_TOKEN} (a bearer token) or {ENV_BASIC} (USER:PASSWORD for HTTP basic auth), and "
            "then every request needs them; without, the dashboard is read-only, unless --local-actions "
            "lets a loopback dashboard act for every user of this machine."
        ),
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"where to listen [env {ENV_LISTEN}] ({DEFAULT_LISTEN}; port 0: any free port)",
    )
    p.add_argument("--read-only", action="store_true", help="offer no actions, refuse every POST")
    p.add_argument(
        "--local-actions",
        action="store_true",
        help="on a loopback address without credentials, offer actions all the same: to every user of "
        "this machine",
    )
    p.add_argument(
        "--trace-url",
        metavar="TEMPLATE",
        help=f"an attempt's trace link, with {{trace_id}}, or 'none' [env {ENV_TRACE_URL}] "
        f"(Jaeger's: ${ENV_JAEGER} or http://localhost:16686, + /trace/{{trace_id}})",
    )
    p.add_argument(
        "--refresh",
        type=float,
        default=DEFAULT_REFRESH_S,
        metavar="S",
        help=f"seconds between two updates of a page ({DEFAULT_REFRESH_S:g})",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        metavar="N",
        help=f"requests served at once, and database connections ({DEFAULT_THREADS})",
    )
    return {"dashboard": cmd_dashboard}
