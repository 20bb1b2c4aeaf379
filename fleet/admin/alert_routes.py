"""Alert routes: the schedules file's `[[alert]]` tables, validated, and stored by `fleetctl apply`.

A route says where notices go (a generic JSON webhook, a Slack-compatible webhook, or e-mail over
SMTP), for which schedules (glob patterns of their names) and which verdicts, how often an open
problem is told again, and whether its recovery is told. Secrets (a webhook's URL, an SMTP
password) are never in the file nor in the database: a route names the environment variable of the
alert process that holds each.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Literal

import orjson
import psycopg
from psycopg.types.json import Jsonb

from fleet.declare import Schedule, gather
from fleet.errors import ScheduleFileError
from fleet.health.verdicts import SEVERITY, UNHEALTHY, Verdict
from fleet.store.queries import q
from fleet.timing.schedfile import (
    MAX_ARGS_BYTES,
    MAX_DURATION,
    NAME_CHARS,
    ScheduleSpec,
    parse_toml,
    shown,
    text_field,
    unknown_field,
)
from fleet.timing.schedule import TimingError, parse_duration

Kind = Literal["webhook", "slack", "email"]
KINDS: Final[tuple[Kind, ...]] = ("webhook", "slack", "email")
Security = Literal["none", "starttls", "tls"]
SECURITIES: Final[tuple[Security, ...]] = ("none", "starttls", "tls")
DEFAULT_PORTS: Final[dict[str, int]] = {"none": 25, "starttls": 587, "tls": 465}
# What a route may tell of: every verdict but OK (a route may tell of PAUSED, say); by default the
# unhealthy ones, in the order of their severity.
ALERTABLE: Final[tuple[Verdict, ...]] = tuple(v for v in SEVERITY if v != "OK")
DEFAULT_VERDICTS: Final[tuple[Verdict, ...]] = tuple(v for v in SEVERITY if v in UNHEALTHY)
# An open problem is told again at most this often.
MIN_REPEAT: Final = timedelta(minutes=1)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
_ADDRESS = re.compile(r"[^@\s<>,;]+@[^@\s<>,;]+")
_COMMON = {"name", "kind", "schedules", "verdicts", "repeat", "recovery"}
_TARGET_KEYS: Final[dict[str, set[str]]] = {
    "webhook": {"url_env", "secret_env"},
    "slack": {"url_env", "mention"},
    "email": {
        "to",
        "from",
        "smtp_host",
        "smtp_port",
        "smtp_security",
        "smtp_user",
        "smtp_password_env",
        "subject_prefix",
    },
}
_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*alert[ \t]*\]\]", re.MULTILINE)


@dataclass(frozen=True)
class AlertRoute:
    """One validated `[[alert]]` table, every default filled in."""

    name: str
    kind: Kind
    schedules: tuple[str, ...] = ("*",)
    verdicts: tuple[Verdict, ...] = DEFAULT_VERDICTS
    repeat: timedelta | None = None
    recovery: bool = True
    # The kind's own settings, as the file gives them (the port and security filled in for email).
    target: dict[str, Any] = field(default_factory=dict)

    def covers(self, schedule: str) -> bool:
        """Whether the route's patterns match the schedule's name (shell-style, case-sensitive)."""
        return any(fnmatch.fnmatchcase(schedule, pattern) for pattern in self.schedules)

    def tells(self, verdict: str) -> bool:
        return verdict in self.verdicts


def route_from_row(row: dict[str, Any]) -> AlertRoute:
    """The route a `fleet.admin.alert_routes` row holds."""
    return AlertRoute(
        name=row["name"],
        kind=row["kind"],
        schedules=tuple(row["schedules"]),
        verdicts=tuple(row["verdicts"]),
        repeat=row["repeat"],
        recovery=row["recovery"],
        target=dict(row["target"]),
    )


def declares_alerts(text: str) -> bool:
    """Whether a schedules file's text may hold [[alert]] tables (read again only then)."""
    return _HEADER.search(text) is not None


def load_routes(text: str) -> list[AlertRoute]:
    """The routes of a schedules file's text; ScheduleFileError listing every problem."""
    if not declares_alerts(text):
        return []
    try:
        doc = parse_toml(text)
    except ValueError as e:
        raise ScheduleFileError([f"file: not valid TOML: {e}"]) from None
    entries = doc.get("alert", [])
    if not isinstance(entries, list):
        raise ScheduleFileError(["file: 'alert' must be an array of tables ([[alert]])"])
    routes: list[AlertRoute] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        where = f"alert #{i}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a table")
            continue
        name = entry.get("name")
        if isinstance(name, str) and name:
            where = f"alert {shown(name)}"
            if name in seen:
                problems.append(f"{where}: name: declared twice, at [[alert]] #{seen[name]} and #{i}")
            seen.setdefault(name, i)
        route, errs = parse_route(entry, where)
        problems.extend(errs)
        if route is not None:
            routes.append(route)
    if problems:
        raise ScheduleFileError(problems)
    return routes


def gather_routes(files: Sequence[Path]) -> list[AlertRoute]:
    """The routes of the files together; ScheduleFileError with every problem (a route declared in
    two files among them). Files that cannot be read are the schedules' reader's to report."""
    problems: list[str] = []
    found: dict[str, str] = {}
    routes: list[AlertRoute] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        try:
            for route in load_routes(text):
                if route.name in found:
                    problems.append(
                        f"alert {route.name!r}: name: declared twice, in {found[route.name]} and in {path}"
                    )
                    continue
                found[route.name] = str(path)
                routes.append(route)
        except ScheduleFileError as e:
            problems.extend(f"{path}: {p}" if len(files) > 1 else p for p in e.problems)
    if problems:
        raise ScheduleFileError(problems)
    return routes


def gather_all(
    files: Sequence[Path], in_code: Sequence[Schedule], max_args_bytes: int = MAX_ARGS_BYTES
) -> tuple[list[ScheduleSpec], list[AlertRoute] | None]:
    """The schedules of the files and of code (`fleet.declare.gather`) and the alert routes of the
    files (None when no file is given: the stored routes stay as they are); ScheduleFileError with
    every problem of both at once."""
    problems: list[str] = []
    specs: list[ScheduleSpec] = []
    routes: list[AlertRoute] | None = None
    try:
        specs = gather(files, in_code, max_args_bytes)
    except ScheduleFileError as e:
        problems.extend(e.problems)
    if files:
        try:
            routes = gather_routes(files)
        except ScheduleFileError as e:  # a file that is not TOML is reported once, by the schedules
            problems.extend(p for p in e.problems if "not valid TOML" not in p)
    if problems:
        raise ScheduleFileError(problems)
    return specs, routes


def parse_route(entry: dict[str, Any], where: str) -> tuple[AlertRoute | None, list[str]]:
    """One `[[alert]]` table validated, or its problems, each ``"{where}: {field}: {message}"``."""
    errs: list[str] = []

    def bad(fieldname: str, msg: str) -> None:
        errs.append(f"{where}: {fieldname}: {msg}")

    name = entry.get("name")
    text_field(bad, "name", name, _NAME, NAME_CHARS, "at most 100 characters, the first a letter or a digit")
    kind = entry.get("kind")
    if kind not in KINDS:
        bad("kind", f"required; one of {' | '.join(KINDS)}, got {shown(kind)}")
        kind = None
    allowed = _COMMON | (_TARGET_KEYS[kind] if kind else set().union(*_TARGET_KEYS.values()))
    for key in sorted(set(entry) - allowed):
        bad(key, unknown_field(key, allowed, f" for kind {kind}" if kind else ""))

    schedules = entry.get("schedules", ["*"])
    if isinstance(schedules, str):
        schedules = [schedules]
    if (
        not isinstance(schedules, list)
        or not schedules
        or not all(isinstance(p, str) and p and len(p) <= 200 for p in schedules)
    ):
        bad("schedules", f'a list of name patterns such as ["reports.*"], got {shown(schedules)}')
        schedules = ["*"]
    verdicts = entry.get("verdicts", list(DEFAULT_VERDICTS))
    if isinstance(verdicts, str):
        verdicts = [verdicts]
    if not isinstance(verdicts, list) or not verdicts:
        bad("verdicts", f'a list of verdicts such as ["LATE", "DEAD"], got {shown(verdicts)}')
        verdicts = list(DEFAULT_VERDICTS)
    unknown = [v for v in verdicts if v not in ALERTABLE]
    if unknown:
        bad("verdicts", f"unknown verdict(s) {', '.join(map(shown, unknown))}; one of {', '.join(ALERTABLE)}")
    ordered = tuple(v for v in ALERTABLE if v in verdicts)
    repeat: timedelta | None = None
    if "repeat" in entry:
        try:
            repeat = parse_duration(entry["repeat"], "repeat")
            if not MIN_REPEAT <= repeat <= MAX_DURATION:
                bad("repeat", f"from 1m to {MAX_DURATION.days} days, got {shown(entry['repeat'])}")
                repeat = None
        except TimingError as e:
            errs.append(f"{where}: {e}")
    recovery = entry.get("recovery", True)
    if not isinstance(recovery, bool):
        bad("recovery", f"true or false, got {shown(recovery)}")
        recovery = True

    target: dict[str, Any] = {}
    if kind in ("webhook", "slack"):
        target["url_env"] = _env_name(entry, "url_env", True, bad)
        if kind == "webhook" and "secret_env" in entry:
            target["secret_env"] = _env_name(entry, "secret_env", True, bad)
        if kind == "slack" and "mention" in entry:
            mention = entry["mention"]
            if not isinstance(mention, str) or len(mention) > 200:
                bad("mention", f'a short text such as "<!here>", got {shown(mention)}')
            else:
                target["mention"] = mention
    elif kind == "email":
        target.update(_email_target(entry, bad))

    if errs:
        return None, errs
    assert kind is not None
    return (
        AlertRoute(
            name=str(name),
            kind=kind,
            schedules=tuple(dict.fromkeys(schedules)),
            verdicts=ordered,
            repeat=repeat,
            recovery=recovery,
            target=target,
        ),
        [],
    )


def _env_name(entry: dict[str, Any], key: str, required: bool, bad: Any) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not _ENV.fullmatch(value):
        got = f", got {shown(value)}" if value is not None else ""
        bad(
            key,
            "required; the name of the alert process's environment variable that holds it "
            f"(the secret itself stays out of the file){got}",
        )
        return None
    return value


def _email_target(entry: dict[str, Any], bad: Any) -> dict[str, Any]:
    target: dict[str, Any] = {}
    to = entry.get("to")
    if isinstance(to, str):
        to = [to]
    if (
        not isinstance(to, list)
        or not to
        or not all(isinstance(a, str) and _ADDRESS.fullmatch(a) for a in to)
    ):
        bad("to", f'required; a list of addresses such as ["oncall@example.com"], got {shown(to)}')
    else:
        target["to"] = to
    sender = entry.get("from")
    if not isinstance(sender, str) or not _ADDRESS.fullmatch(sender):
        bad("from", f"required; an address such as 'fleet@example.com', got {shown(sender)}")
    else:
        target["from"] = sender
    host = entry.get("smtp_host")
    if not isinstance(host, str) or not host or len(host) > 255 or any(c.isspace() for c in host):
        bad("smtp_host", f"required; the SMTP server's host name, got {shown(host)}")
    else:
        target["smtp_host"] = host
    security = entry.get("smtp_security", "starttls")
    if security not in SECURITIES:
        bad("smtp_security", f"one of {' | '.join(SECURITIES)}, got {shown(security)}")
        security = "starttls"
    target["smtp_security"] = security
    port = entry.get("smtp_port", DEFAULT_PORTS[security])
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        bad("smtp_port", f"a port from 1 to 65535, got {shown(port)}")
    else:
        target["smtp_port"] = port
    user = entry.get("smtp_user")
    if user is not None:
        if not isinstance(user, str) or not user:
            bad("smtp_user", f"a user name, got {shown(user)}")
        else:
            target["smtp_user"] = user
            target["smtp_password_env"] = _env_name(entry, "smtp_password_env", True, bad)
    elif "smtp_password_env" in entry:
        bad("smtp_password_env", "given without smtp_user")
    prefix = entry.get("subject_prefix", "[fleet]")
    if not isinstance(prefix, str) or len(prefix) > 100 or "\n" in prefix or "\r" in prefix:
        bad("subject_prefix", f"a short one-line text, got {shown(prefix)}")
    else:
        target["subject_prefix"] = prefix
    return target


# -- stored by apply -----------------------------------------------------------------------------


@dataclass
class RoutesResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _row(route: AlertRoute) -> dict[str, Any]:
    return {
        "name": route.name,
        "kind": route.kind,
        "schedules": list(route.schedules),
        "verdicts": list(route.verdicts),
        "repeat": route.repeat,
        "recovery": route.recovery,
        "target": route.target,
    }


def apply_routes(
    conn: psycopg.Connection[Any], routes: Sequence[AlertRoute], *, prune: bool, plan: bool = False
) -> RoutesResult:
    """Create and update the stored routes to match `routes` (and remove the others with `prune`),
    in the caller's transaction; with `plan`, only say what would change. Changing a route keeps
    what it has told of (its open problems are not told again); removing one drops its state and
    the notices it has not sent yet."""
    result = RoutesResult()
    stored = {r["name"]: route_from_row(r) for r in conn.execute(q("alert_route_list"))}
    changed: list[AlertRoute] = []
    for route in routes:
        old = stored.get(route.name)
        if old is None:
            result.created.append(route.name)
            changed.append(route)
        elif _row(old) != _row(route):
            result.updated.append(route.name)
            changed.append(route)
        else:
            result.unchanged.append(route.name)
    wanted = {r.name for r in routes}
    if prune:
        result.removed = sorted(n for n in stored if n not in wanted)
    if plan:
        return result
    for route in changed:
        row = _row(route)
        conn.execute(
            q("alert_route_upsert"),
            {**row, "target": Jsonb(row["target"], dumps=lambda o: orjson.dumps(o).decode())},
        )
    if result.removed:
        conn.execute(q("alert_route_delete"), {"names": result.removed})
    return result
