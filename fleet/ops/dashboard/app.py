"""The dashboard's requests: the checks every request passes (host, credentials, and for an action
read-only mode, origin and CSRF token), routing, and rendering through autoescaped templates."""

from __future__ import annotations

import hmac
import secrets
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Final

import jinja2
import orjson
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from fleet.errors import DatabaseUnavailable, RequestError, UnknownRun, UnknownSchedule, UsageError
from fleet.health.reading import health_report, run_get
from fleet.observe import logs
from fleet.ops.status import human
from fleet.ops.targets import iso, parse_instant, schedule_row
from fleet.store.queries import q

from . import pages
from .charts import COVERAGE_WORDS, SEVERITY
from .config import DashboardSettings, is_loopback

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STATIC: Final = {"dashboard.css": "text/css; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8"}
ACTIONS: Final = ("retry", "discard", "trigger", "pause", "resume")
STATEMENT_TIMEOUT_MS: Final = 5000
POOL_WAIT_S: Final = 5.0
FLASHES_KEPT: Final = 256


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]  # case-insensitive lookups (an email.message.Message)
    form: dict[str, str] = field(default_factory=dict)


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


class NotFound(Exception):
    """No such page."""


def _when(value: datetime | str | None) -> str:
    """An instant for people, in UTC to the second: ``2026-11-02 10:00:00Z``."""
    if value is None:
        return "-"
    if isinstance(value, str):
        value = parse_instant(value, "time")
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _clock(value: datetime, span: timedelta) -> str:
    """An axis label: the time of day, with the date when the axis spans days."""
    return value.astimezone(UTC).strftime("%H:%M:%S" if span < timedelta(days=1) else "%m-%d %H:%M")


def schedule_url(name: str) -> str:
    return "/schedules/" + urllib.parse.quote(name, safe="")


def slot_url(name: str, slot: datetime | str) -> str:
    text = slot if isinstance(slot, str) else iso(slot)
    return f"{schedule_url(name)}/slots/{urllib.parse.quote(str(text), safe=':')}"


# The overview's verdicts are computed anew every this many refresh periods.
OVERVIEW_REFRESHES: Final = 3


class Dashboard:
    """Answers requests; safe to call from several threads (each borrows its own connection)."""

    def __init__(self, settings: DashboardSettings, pool: ConnectionPool[Any]) -> None:
        self.settings = settings
        self.pool = pool
        # A secret of this process, in every form: a page of another site cannot know it.
        self.csrf = secrets.token_urlsafe(32)
        # the overview's verdicts, shared by every page open on it: computed every third refresh
        # while anyone watches, however many operators do (verdicts move on the schedules' own
        # cadence, seconds to hours; each computation reads every schedule)
        self.health = pages.SharedHealth(
            self._health_report, max_age_s=OVERVIEW_REFRESHES * settings.refresh_s
        )
        self._flashes: OrderedDict[str, str] = OrderedDict()
        self._flash_lock = threading.Lock()
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("fleet.ops.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters.update(
            human=human, when=_when, clock=_clock, json=lambda v: orjson.dumps(v).decode(), clip=pages.clip
        )
        self.env.globals.update(
            schedule_url=schedule_url,
            slot_url=slot_url,
            csrf=self.csrf,
            settings=settings,
            verdicts=pages.VERDICTS,
            verdict_meanings=pages.VERDICT_MEANINGS,
            shown=pages.SHOWN,
            coverage_words=COVERAGE_WORDS,
            coverage_keys=SEVERITY,
        )

    # -- entry ---------------------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        refusal = self._refuse(req)
        if refusal is not None:
            return refusal
        try:
            if req.method == "POST":
                return self._post(req)
            return self._get(req)
        except NotFound:
            return self._error(404, "no such page")
        except (UnknownSchedule, UnknownRun) as e:
            return self._error(404, str(e))
        except (UsageError, RequestError) as e:
            status = 404 if str(e).startswith(("no such schedule", "schedule ")) else 400
            return self._error(status, str(e))
        except (psycopg.OperationalError, PoolTimeout, DatabaseUnavailable) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return self._error(503, f"database unavailable: {first}")
        except Exception as e:  # noqa: BLE001 - logged; the browser gets a page, not a traceback
            logs.event("dashboard_error", path=req.path, error=f"{type(e).__name__}: {e}"[:500])
            return self._error(500, "internal error (logged)")

    def _refuse(self, req: Request) -> Response | None:
        """The checks before anything is read: a loopback dashboard answers only to loopback names
        (a DNS name rebound to 127.0.0.1 gets nothing), and configured credentials are required."""
        host = (req.headers.get("Host") or "").strip()
        if self.settings.loopback and not is_loopback(urllib.parse.urlsplit(f"//{host}").hostname or ""):
            return self._error(400, "Host: this dashboard answers on its loopback address only")
        if not self.settings.credentials.allows(req.headers.get("Authorization")):
            r = self._error(401, "credentials required")
            if self.settings.credentials.basic:
                r.headers["WWW-Authenticate"] = 'Basic realm="fleet dashboard", charset="UTF-8"'
            return r
        return None

    # -- pages ---------------------------------------------------------------------------------

    def _get(self, req: Request) -> Response:
        parts = [urllib.parse.unquote(p) for p in req.path.strip("/").split("/")] if req.path != "/" else []
        fragment = req.query.get("fragment") == "1"
        if parts == ["favicon.ico"]:
            return Response(204, headers={"Cache-Control": "max-age=86400"})
        if parts and parts[0] == "static" and len(parts) == 2 and parts[1] in STATIC:
            body = resources.files("fleet.ops.dashboard").joinpath("static", parts[1]).read_bytes()
            return Response(200, body, STATIC[parts[1]], {"Cache-Control": "max-age=300"})
        if not parts:
            verdict = req.query.get("verdict") or None
            if verdict is not None and verdict not in pages.VERDICTS:
                raise UsageError(f"verdict: one of {', '.join(pages.VERDICTS)}, got {verdict!r}")
            page = _int(req.query.get("page"), "page", 1)
            data = self._read(lambda c: pages.overview(c, verdict, req.query.get("name"), page, self.health))
            return self._page("overview", fragment, data, verdict=verdict, name=req.query.get("name", ""))
        if parts == ["workers"]:
            return self._page("workers", fragment, self._read(pages.workers_page))
        if parts[0] == "schedules" and len(parts) == 2:
            before = parse_instant(req.query["before"], "before") if req.query.get("before") else None
            limit = _int(req.query.get("limit"), "limit", pages.TIMELINE_SLOTS)
            data = self._read(lambda c: pages.schedule_page(c, parts[1], before, limit, full=not fragment))
            flash = self._flash_take(req.query.get("flash"))
            return self._page("schedule", fragment, data, flash=flash, before=req.query.get("before"))
        if parts[0] == "schedules" and len(parts) == 3 and parts[2] == "ledger.json":
            since = parse_instant(req.query["since"], "since") if req.query.get("since") else None
            until = parse_instant(req.query["until"], "until") if req.query.get("until") else None
            return _json(self._read(lambda c: pages.ledger_json(c, parts[1], since, until)))
        if parts[0] == "schedules" and len(parts) == 3 and parts[2] == "args.json":
            return _json(self._read(lambda c: {"args": schedule_row(c, parts[1])["args"]})["args"])
        if parts[0] == "schedules" and len(parts) == 5 and parts[2] == "slots" and parts[4] == "args.json":
            slot = parse_instant(parts[3], "slot")
            return _json(self._read(lambda c: {"args": run_get(c, parts[1], slot)["args"]})["args"])
        if parts[0] == "schedules" and len(parts) == 4 and parts[2] == "slots":
            slot = parse_instant(parts[3], "slot")
            s = self.settings
            data = self._read(lambda c: pages.slot_page(c, parts[1], slot, s.trace_url, s.jaeger))
            return self._page("slot", fragment, data, name=parts[1])
        raise NotFound

    def _page(self, page: str, fragment: bool, data: dict[str, Any], **extra: Any) -> Response:
        template = f"{page}_live.html" if fragment else f"{page}.html"
        body = self.env.get_template(template).render(**data, **extra).encode()
        return Response(200, body)

    def close(self) -> None:
        self.health.close()

    def _health_report(self) -> pages.Report:
        with self.pool.connection(timeout=POOL_WAIT_S) as conn:
            conn.execute(q("session_configure"), {"ms": STATEMENT_TIMEOUT_MS})
            return health_report(conn)

    def _read(self, fn: Callable[[psycopg.Connection[Any]], dict[str, Any]]) -> dict[str, Any]:
        with self.pool.connection(timeout=POOL_WAIT_S) as conn:
            conn.execute(q("session_configure"), {"ms": STATEMENT_TIMEOUT_MS})
            return fn(conn)

    def _error(self, status: int, message: str) -> Response:
        body = self.env.get_template("error.html").render(status=status, message=message).encode()
        return Response(status, body)

    # -- actions -------------------------------------------------------------------------------

    def _post(self, req: Request) -> Response:
        parts = [urllib.parse.unquote(p) for p in req.path.strip("/").split("/")]
        if len(parts) != 3 or parts[0] != "schedules" or parts[2] not in ACTIONS:
            raise NotFound
        if self.settings.read_only:
            return self._error(403, f"read-only: {self.settings.read_only_reason}")
        if not self._same_origin(req):
            return self._error(403, "Origin: the request does not come from this dashboard's pages")
        if not hmac.compare_digest(req.form.get("csrf", "").encode(), self.csrf.encode()):
            return self._error(403, "csrf: the form's token is missing or stale; reload the page")
        name, action = parts[1], parts[2]
        # The audit row names the dashboard, and the user its basic credentials name (a bearer
        # token names nobody).
        basic = self.settings.credentials.basic
        by = f"dashboard:{basic[0]}"[:100] if basic else "dashboard"
        done = self._read(lambda c: {"text": pages.act(c, name, action, req.form, by)})["text"]
        self.health.invalidate()
        location = f"{schedule_url(name)}?flash={self._flash_put(f'{action}: {done}')}"
        return Response(303, b"", headers={"Location": location})

    @staticmethod
    def _same_origin(req: Request) -> bool:
        """The request comes from a page of this host: Origin (or, without it, Referer) names it."""
        host = (req.headers.get("Host") or "").strip().lower()
        source = req.headers.get("Origin") or req.headers.get("Referer") or ""
        if not host or source in ("", "null"):
            return False
        return urllib.parse.urlsplit(source).netloc.lower() == host

    def _flash_put(self, text: str) -> str:
        key = secrets.token_urlsafe(8)
        with self._flash_lock:
            self._flashes[key] = text
            while len(self._flashes) > FLASHES_KEPT:
                self._flashes.popitem(last=False)
        return key

    def _flash_take(self, key: str | None) -> str | None:
        if not key:
            return None
        with self._flash_lock:
            return self._flashes.get(key)


def _json(value: Any) -> Response:
    """A value in full, as JSON (a page shows only the start of a large one)."""
    return Response(200, orjson.dumps(value, option=orjson.OPT_INDENT_2), "application/json")


def _int(text: str | None, field: str, default: int) -> int:
    if text is None or text == "":
        return default
    if not text.isdigit() or not 0 < int(text) < 1_000_000:
        raise UsageError(f"{field}: a positive whole number, got {text!r}")
    return int(text)
