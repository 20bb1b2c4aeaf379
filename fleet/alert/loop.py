"""The alert process's rounds: read the verdicts and queue the notices (one alert process at a time),
then send the notices that are due (any alert process, each notice by one).

Reading is a chore (fleet.chores) named `alert_evaluate`: the alert process that takes its row
(FOR UPDATE SKIP LOCKED) reads the health as `fleetctl status` does, compares it with the open
alert state and writes the notices and the new state in that one transaction, so two alert
processes never queue the same notice. Sending claims notices with FOR UPDATE SKIP LOCKED under
a lease, sends them outside any transaction, and records the outcome fenced on the claim's
attempt; a notice that could not be delivered is tried again with back-off.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson
import psycopg
from psycopg.types.json import Jsonb

from fleet.admin.alert_routes import AlertRoute, route_from_row
from fleet.alert.evaluate import OpenProblem, conditions, plan
from fleet.alert.options import GIVE_UP_S, KEEP_S, RETRY_BASE_S, RETRY_CAP_S, AlertSettings
from fleet.alert.send import DeliveryFailed, send
from fleet.errors import DatabaseUnavailable, SchemaOutdated
from fleet.health.reading import health_report
from fleet.observe import logs
from fleet.store.chores import Chore, Progress, Step, next_wait, register, run_due
from fleet.store.db import connect, describe, permission_denied
from fleet.store.migrate import check_schema
from fleet.store.queries import q
from fleet.timing.backoff import backoff_delay

CHORE: Final = "alert_evaluate"
# After losing the database, the next try comes this much later; after an unexpected error, this.
RECONNECT_S: Final = 2.0
ERROR_WAIT_S: Final = 5.0


@dataclass(frozen=True)
class Evaluated:
    notices: int
    opened: int
    closed: int


@dataclass(frozen=True)
class RoundResult:
    evaluated: Evaluated | None  # None: another alert process read the verdicts, or it was not due
    sent: int
    failed: int


def _json(value: Any) -> Jsonb:
    return Jsonb(value, dumps=lambda o: orjson.dumps(o).decode())


def evaluate(conn: psycopg.Connection[Any], now: datetime) -> Evaluated:
    """Compare the verdicts at `now` with the open alert state; queue the notices and keep the new
    state (in the caller's transaction, which holds the chore's row)."""
    routes = [route_from_row(r) for r in conn.execute(q("alert_route_list"))]
    if not routes:
        return Evaluated(0, 0, 0)
    fleet, healths = health_report(conn, None, now)
    subjects = conditions(fleet, healths)
    open_problems = [OpenProblem(**r) for r in conn.execute(q("alert_state_list"))]
    p = plan(routes, subjects, open_problems, now)

    def key(k: tuple[str, str, str], **more: Any) -> dict[str, Any]:
        return {"route": k[0], "subject": k[1], "verdict": k[2], **more}

    with conn.cursor() as cur:  # executemany: one pipelined round trip per statement
        if p.opened:
            cur.executemany(q("alert_state_open"), [key(k, now=now) for k in p.opened])
        if p.held:
            cur.executemany(q("alert_state_hold"), [key(k, now=now) for k in p.held])
        if p.repeated:
            cur.executemany(q("alert_state_touch"), [key(k, now=now) for k in p.repeated])
        if p.closed or p.dropped:
            cur.executemany(q("alert_state_close"), [key(k) for k in p.closed + p.dropped])
        if p.notices:
            cur.executemany(
                q("notice_add"),
                [
                    {
                        "route": n.route,
                        "subject": n.subject,
                        "verdict": n.verdict,
                        "event": n.event,
                        "payload": _json(n.payload),
                        "now": now,
                    }
                    for n in p.notices
                ],
            )
    for n in p.notices:
        logs.event("alert_queued", route=n.route, schedule=n.subject or None, verdict=n.verdict, kind=n.event)
    return Evaluated(len(p.notices), len(p.opened), len(p.closed))


class Alerter:
    """One alert process: `run_once` reads the verdicts if due and sends the due notices; `run`
    repeats it until `stop` is set."""

    def __init__(
        self,
        settings: AlertSettings,
        stop: threading.Event | None = None,
        now: Callable[[], datetime | None] = lambda: None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.s = settings
        self.stop = stop or threading.Event()
        self.now = now  # tests pin the database's now
        self.rand = rand
        self.chores = [Chore(name=CHORE, every_s=settings.poll_s, step=self._step)]
        self.conn: psycopg.Connection[Any] | None = None
        self.pool = ThreadPoolExecutor(settings.senders, thread_name_prefix="fleet-alert-send")
        self.evaluated: Evaluated | None = None
        self.checked_secrets = False

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            assert self.s.database_url is not None
            conn = connect(self.s.database_url, f"fleet-alert {self.s.alert_id}")
            try:
                check_schema(conn)  # not migrated yet: waited for, as a ticker does
                register(conn, self.chores)
                if not self.checked_secrets:
                    self._check_secrets(conn)
            except BaseException:
                conn.close()
                raise
            self.conn = conn
        return self.conn

    def _check_secrets(self, conn: psycopg.Connection[Any]) -> None:
        """Say, once, which routes name a variable this process's environment does not set."""
        self.checked_secrets = True
        routes = [route_from_row(r) for r in conn.execute(q("alert_route_list"))]
        if not routes:
            logs.event("alert_no_routes", hint="declare [[alert]] tables in the schedules file and apply it")
        for route in routes:
            for key, var in route.target.items():
                if key.endswith("_env") and var and not self.s.environ.get(var):
                    logs.event("alert_secret_unset", route=route.name, field=key, variable=var)

    def run_once(self) -> RoundResult:
        conn = self._connection()
        self.evaluated = None
        run_due(conn, self.chores, self.now())
        sent, failed = self.deliver(conn)
        return RoundResult(self.evaluated, sent, failed)

    def _step(self, conn: psycopg.Connection[Any], at: Progress) -> Step:
        """The chore's step: one evaluation, and old notices pruned."""
        self.evaluated = evaluate(conn, at.now)
        conn.execute(q("notice_prune"), {"now": at.now, "keep_s": KEEP_S})
        return Step(more=False, mark=at.now)

    def deliver(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        """Send due notices until none is left to claim (or a stop); returns (sent, failed)."""
        sent = failed = 0
        routes: dict[str, AlertRoute] = {}
        while not self.stop.is_set():
            claimed = conn.execute(
                q("notice_claim"),
                {
                    "now": self.now(),
                    "limit": self.s.senders,
                    "by": self.s.alert_id,
                    "lease_s": self.s.lease_s,
                },
            ).fetchall()
            if not claimed:
                break
            if any(c["route"] not in routes for c in claimed):
                routes = {r["name"]: route_from_row(r) for r in conn.execute(q("alert_route_list"))}
            jobs = [(c, self.pool.submit(self._send, routes.get(c["route"]), c)) for c in claimed]
            for c, job in jobs:
                error = job.result()
                fields = {
                    "route": c["route"],
                    "schedule": c["subject"] or None,
                    "verdict": c["verdict"],
                    "kind": c["event"],
                    "notice": c["id"],
                    "attempt": c["attempts"],
                }
                if error is None:
                    conn.execute(
                        q("notice_sent"), {"id": c["id"], "attempts": c["attempts"], "now": self.now()}
                    )
                    logs.event("alert_sent", **fields)
                    sent += 1
                    continue
                retry_in = max(1.0, backoff_delay(c["attempts"], RETRY_BASE_S, RETRY_CAP_S, self.rand))
                row = conn.execute(
                    q("notice_failed"),
                    {
                        "id": c["id"],
                        "attempts": c["attempts"],
                        "error": error,
                        "retry_in_s": retry_in,
                        "give_up_s": GIVE_UP_S,
                        "now": self.now(),
                    },
                ).fetchone()
                gave_up = row is not None and row["status"] == "failed"
                logs.event(
                    "alert_gave_up" if gave_up else "alert_failed",
                    **fields,
                    error=error,
                    retry_in_s=None if gave_up else round(retry_in, 1),
                )
                failed += 1
        return sent, failed

    def _send(self, route: AlertRoute | None, claimed: dict[str, Any]) -> str | None:
        """Deliver one claimed notice; the error line, or None when it was accepted."""
        if route is None:
            return "the route was removed"
        try:
            send(route, claimed["id"], claimed["payload"], self.s.environ, self.s.timeout_s)
        except DeliveryFailed as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - one notice's failure never stops the others
            return f"{type(e).__name__}: {str(e).strip()[:200]}"
        return None

    def _wait_s(self) -> float:
        """Seconds until the next reading or the next notice due, at most the poll interval."""
        conn = self._connection()
        waits = [self.s.poll_s]
        chore = next_wait(conn, self.chores, self.now())
        if chore is not None:
            waits.append(chore)
        row = conn.execute(q("notice_next_wait"), {"now": self.now()}).fetchone()
        if row is not None and row["wait_s"] is not None:
            waits.append(row["wait_s"])
        return max(0.05, min(waits))

    def run(self) -> int:
        """Rounds until `stop` is set (or one round with `once`); 0 when stopped, 2 when the role
        lacks a grant. The database out of reach, or not migrated yet, is waited for."""
        logs.event("alert_started", alert_id=self.s.alert_id, poll_s=self.s.poll_s)
        unavailable = logs.Throttle()
        code = 0
        try:
            while not self.stop.is_set():
                try:
                    self.run_once()
                    if self.s.once:
                        break
                    wait = self._wait_s()
                    unavailable.reset()
                except (psycopg.Error, DatabaseUnavailable, SchemaOutdated) as e:
                    denied = permission_denied(e, self.s.database_url or "", "fleet_alert")
                    if denied is not None:
                        logs.event("permission_denied", alert_id=self.s.alert_id, error=str(denied))
                        code = 2
                        break
                    if self.s.once:
                        raise
                    if unavailable.due():
                        event = "db_unavailable" if isinstance(e, DatabaseUnavailable) else "db_error"
                        logs.event(event, alert_id=self.s.alert_id, error=describe(e))
                    self._drop_connection()
                    wait = RECONNECT_S
                except Exception as e:
                    if self.s.once:
                        raise
                    logs.event("alert_error", alert_id=self.s.alert_id, error=logs.error_text(e))
                    self._drop_connection()
                    wait = ERROR_WAIT_S
                self.stop.wait(wait)
        finally:
            self.close()
            logs.event("alert_stopped", alert_id=self.s.alert_id)
        return code

    def _drop_connection(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
            self.conn = None
