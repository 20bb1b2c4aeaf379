"""`fleetctl alert`: tell a person when a schedule's verdict changes, until stopped."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from typing import Any

from fleet.alert.options import AlertSettings, add_flags, alert_settings
from fleet.errors import UsageError
from fleet.observe import logs
from fleet.store.db import connect, resolve_url, url_params
from fleet.store.queries import q

Command = Any


def add_commands(sub: Any) -> dict[str, Command]:
    p = sub.add_parser(
        "alert",
        help="send verdict changes to webhooks, Slack and e-mail as the [[alert]] routes say (until stopped)",
        description="Read the schedules' verdicts every few seconds and send each change (a problem "
        "that starts, is still there after the route's repeat interval, or ends) to the routes the "
        "schedules file declares ([[alert]], stored by `fleetctl apply`). Several may run: each "
        "notice is sent by one of them. Secrets are read from this process's environment.",
    )
    add_flags(p)
    p.add_argument(
        "--test",
        metavar="ROUTE",
        help="send a test notice through ROUTE now and exit: 0 when it was accepted, 1 when not",
    )
    return {"alert": cmd_alert}


def _url(args: argparse.Namespace) -> str:
    url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or None
    if url:
        url_params(url, "--database-url" if args.database_url else "FLEET_DATABASE_URL")
    return resolve_url(url)


def cmd_alert(args: argparse.Namespace) -> int:
    from fleet.alert.loop import Alerter

    settings = alert_settings(args, _url(args), os.environ)
    assert settings.database_url is not None
    if args.test:
        from fleet.store.migrate import check_schema

        with connect(settings.database_url, "fleetctl alert") as conn:
            check_schema(conn)
            routes = _routes(conn)
        return _test(settings, routes, args.test)
    stop = threading.Event()
    # Its log's reader gone (`fleetctl alert | head -1`), it stops as on SIGTERM.
    logs.configure(settings.log_format, on_output_gone=stop.set, process="alert")

    def on_signal(sig: signal.Signals) -> None:
        try:
            if not stop.is_set():
                logs.event("stop_requested", signal=sig.name)
        finally:
            stop.set()

    from fleet.process.signals import on_stop_signal

    on_stop_signal(on_signal)
    return logs.exit_code(Alerter(settings, stop).run())


def _routes(conn: Any) -> dict[str, Any]:
    from fleet.admin.alert_routes import route_from_row

    return {r["name"]: route_from_row(r) for r in conn.execute(q("alert_route_list"))}


def _test(settings: AlertSettings, routes: dict[str, Any], name: str) -> int:
    from fleet.alert.evaluate import iso
    from fleet.alert.send import DeliveryFailed, send

    route = routes.get(name)
    if route is None:
        known = ", ".join(routes) or "none; declare [[alert]] tables and apply the file"
        raise UsageError(f"--test: no route {name!r} (routes: {known})")
    now = iso(datetime.now(UTC))
    payload = {
        "event": "alert",
        "route": route.name,
        "schedule": None,
        "verdict": "TEST",
        "detail": "a test notice from `fleetctl alert --test`",
        "summary": f"TEST: fleet: route {route.name} reaches you",
        "verdict_now": None,
        "problems": [],
        "opened_at": now,
        "at": now,
        "notice": 0,
        "test": True,
    }
    try:
        send(route, 0, payload, settings.environ, settings.timeout_s)
    except DeliveryFailed as e:
        print(f"fleetctl alert: route {route.name}: not delivered: {e}", file=sys.stderr)
        return 1
    print(f"fleetctl alert: route {route.name}: test notice delivered")
    return 0
