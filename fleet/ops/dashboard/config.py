"""The dashboard's settings: where it listens, who may act, where traces are, from flags and
`FLEET_DASHBOARD_*` environment variables, validated once."""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fleet.errors import UsageError
from fleet.ops.httpd import Credentials, credentials_from
from fleet.ops.jaeger import DEFAULT_JAEGER_URL

DEFAULT_LISTEN: Final = "127.0.0.1:8787"
# Requests handled at once; more wait briefly for a free thread, then get 503.
DEFAULT_THREADS: Final = 8
# Seconds between two refreshes of a page's live part.
DEFAULT_REFRESH_S: Final = 3.0
# A trace link names an attempt's trace id; Jaeger's UI by default.
DEFAULT_TRACE_PATH: Final = "/trace/{trace_id}"

ENV_TOKEN: Final = "FLEET_DASHBOARD_TOKEN"
ENV_BASIC: Final = "FLEET_DASHBOARD_BASIC_AUTH"
ENV_TRACE_URL: Final = "FLEET_DASHBOARD_TRACE_URL"
ENV_LISTEN: Final = "FLEET_DASHBOARD_LISTEN"
ENV_JAEGER: Final = "FLEET_JAEGER_URL"


@dataclass(frozen=True)
class DashboardSettings:
    host: str
    port: int
    credentials: Credentials
    read_only: bool  # actions refused (and not offered)
    read_only_reason: str | None
    trace_url: str  # a template with {trace_id} (and optionally {span_id}); empty: no trace links
    jaeger: str = DEFAULT_JAEGER_URL  # the Jaeger UI searched for every attempt of a slot
    refresh_s: float = DEFAULT_REFRESH_S
    threads: int = DEFAULT_THREADS

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses: only this machine can reach them."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets); UsageError naming --listen otherwise."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--listen: expected HOST:PORT such as {DEFAULT_LISTEN}, got {text!r}")
    return host, int(port)


def parse_trace_url(template: str | None, jaeger: str | None) -> str:
    """The trace link template: given, or Jaeger's trace page under `jaeger` (or its default)."""
    if template is None:
        return (jaeger or DEFAULT_JAEGER_URL).rstrip("/") + DEFAULT_TRACE_PATH
    if template.strip().lower() == "none":
        return ""  # the workers export no traces: no links
    parts = urllib.parse.urlsplit(template)
    if parts.scheme not in ("http", "https") or not parts.netloc or "{trace_id}" not in template:
        raise UsageError(
            f"--trace-url: expected an http(s) URL holding {{trace_id}}, e.g. "
            f"{DEFAULT_JAEGER_URL}{DEFAULT_TRACE_PATH}; got {template!r}"
        )
    try:
        template.format(trace_id="0", span_id="0")
    except (KeyError, IndexError, ValueError):
        raise UsageError(
            f"--trace-url: only {{trace_id}} and {{span_id}} may be named; got {template!r}"
        ) from None
    return template


def settings_from(
    *,
    listen: str | None,
    read_only: bool,
    trace_url: str | None,
    refresh_s: float,
    threads: int,
    env: Mapping[str, str],
    local_actions: bool = False,
) -> DashboardSettings:
    """Validated settings; UsageError (exit 2) names the flag or variable that is wrong.

    Actions need credentials, on loopback too: every local user reaches a loopback port, and each
    page carries the token a POST needs. `local_actions` lets a loopback dashboard without
    credentials act all the same, for a machine of one's own."""
    host, port = parse_listen(listen or env.get(ENV_LISTEN) or DEFAULT_LISTEN)
    credentials = credentials_from(env, ENV_TOKEN, ENV_BASIC)
    if not 0.5 <= refresh_s <= 300:
        raise UsageError(f"--refresh: between 0.5 and 300 seconds, got {refresh_s:g}")
    if not 1 <= threads <= 64:
        raise UsageError(f"--threads: between 1 and 64, got {threads}")
    if local_actions and not is_loopback(host):
        raise UsageError(
            f"--local-actions: only on a loopback address; beyond it set {ENV_TOKEN} or {ENV_BASIC}"
        )
    reason: str | None = None
    if read_only:
        reason = "started with --read-only"
    elif not is_loopback(host) and not credentials.any:
        # Beyond loopback, anyone who reaches the port could act: not without credentials.
        reason = f"listening beyond loopback without credentials ({ENV_TOKEN} or {ENV_BASIC})"
    elif not credentials.any and not local_actions:
        reason = (
            f"no credentials ({ENV_TOKEN} or {ENV_BASIC}), and on loopback every local user could act "
            "(--local-actions allows it)"
        )
    return DashboardSettings(
        host=host,
        port=port,
        credentials=credentials,
        read_only=reason is not None,
        read_only_reason=reason,
        trace_url=parse_trace_url(trace_url or env.get(ENV_TRACE_URL), env.get(ENV_JAEGER)),
        jaeger=env.get(ENV_JAEGER) or DEFAULT_JAEGER_URL,
        refresh_s=refresh_s,
        threads=threads,
    )


def trace_link(template: str, trace_id: str | None, span_id: str | None) -> str | None:
    """The link to one attempt's trace; None when the attempt has no trace id or links are off."""
    if not trace_id or not template:
        return None
    quote = urllib.parse.quote
    return template.format(trace_id=quote(trace_id, safe=""), span_id=quote(span_id or "", safe=""))
