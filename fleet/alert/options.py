"""The settings of `fleetctl alert`: one frozen object, from flags with FLEET_ALERT_* fallbacks."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fleet.errors import ConfigError
from fleet.process.settings import LOG_FORMATS, check_duration, default_process_id

# How often the verdicts are read and compared with what was told: a fleet with no live ticker is
# told of within a minute (the ticker's staleness limit plus this).
DEFAULT_ALERT_POLL_S: Final = 10.0
# How long one delivery may take (connect, send, answer).
DEFAULT_SEND_TIMEOUT_S: Final = 10.0
# Notices one alert process sends at once.
DEFAULT_SENDERS: Final = 4
MAX_SENDERS: Final = 64
# A claimed notice is another process's to send once this has passed without an answer: well past
# the send timeout, so that a notice is sent twice only when its sender died or stalled mid-send.
LEASE_MARGIN_S: Final = 50.0
# A failed delivery is tried again after a full-jitter back-off from 5 s up to 5 min, for a day.
RETRY_BASE_S: Final = 5.0
RETRY_CAP_S: Final = 300.0
GIVE_UP_S: Final = 86400.0
# Sent and failed notices are kept this long (to look into what was sent, and when).
KEEP_S: Final = 7 * 86400.0


@dataclass(frozen=True)
class AlertSettings:
    database_url: str | None
    alert_id: str
    poll_s: float = DEFAULT_ALERT_POLL_S
    timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    senders: int = DEFAULT_SENDERS
    once: bool = False
    log_format: str = "json"
    # The environment the process started with: where the routes' secrets are read, by name.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def lease_s(self) -> float:
        return self.timeout_s + LEASE_MARGIN_S


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id", help="this alert process's id (host:process) [env FLEET_ALERT_ID]")
    p.add_argument(
        "--poll",
        type=float,
        metavar="S",
        help=f"seconds between readings of the verdicts ({DEFAULT_ALERT_POLL_S:g}) [env FLEET_ALERT_POLL]",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help=f"seconds one delivery may take ({DEFAULT_SEND_TIMEOUT_S:g}) [env FLEET_ALERT_TIMEOUT]",
    )
    p.add_argument(
        "--senders",
        type=int,
        metavar="N",
        help=f"notices sent at once ({DEFAULT_SENDERS}) [env FLEET_ALERT_SENDERS]",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="read the verdicts once (unless another alert process just did), send what is due, exit",
    )
    p.add_argument("--log-format", choices=LOG_FORMATS, help="json (default) or text [env FLEET_LOG_FORMAT]")


def _number(value: Any, environ: Mapping[str, str], var: str, default: float, flag: str) -> float:
    raw = value if value is not None else environ.get(var) or None
    if raw is None:
        return default
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag}: invalid value {raw!r}") from None


def alert_settings(
    a: argparse.Namespace, database_url: str | None, environ: Mapping[str, str]
) -> AlertSettings:
    """The validated settings of the parsed flags and their FLEET_* fallbacks; ConfigError naming
    the flag of the first bad one."""
    poll = check_duration(
        _number(a.poll, environ, "FLEET_ALERT_POLL", DEFAULT_ALERT_POLL_S, "--poll"), "--poll"
    )
    timeout = check_duration(
        _number(a.timeout, environ, "FLEET_ALERT_TIMEOUT", DEFAULT_SEND_TIMEOUT_S, "--timeout"), "--timeout"
    )
    if timeout > 300:
        raise ConfigError(f"--timeout: at most 300 seconds, got {timeout:g}")
    senders = _number(a.senders, environ, "FLEET_ALERT_SENDERS", DEFAULT_SENDERS, "--senders")
    if senders != int(senders) or not 1 <= senders <= MAX_SENDERS:
        raise ConfigError(f"--senders: an integer from 1 to {MAX_SENDERS}, got {senders:g}")
    log_format = a.log_format or environ.get("FLEET_LOG_FORMAT") or "json"
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format: must be one of {', '.join(LOG_FORMATS)}")
    return AlertSettings(
        database_url=database_url,
        alert_id=a.id or environ.get("FLEET_ALERT_ID") or default_process_id("alert"),
        poll_s=poll,
        timeout_s=timeout,
        senders=int(senders),
        once=a.once,
        log_format=log_format,
        environ=dict(environ),
    )
