"""One frozen, validated settings object per executable, from flags with FLEET_* fallbacks."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from fleet.errors import ConfigError
from fleet.process.usage import Parser
from fleet.store.db import url_params
from fleet.timing.schedfile import MAX_RETENTION, MIN_RETENTION
from fleet.timing.schedule import TimingError, parse_duration

DEFAULT_LEASE_S = 60.0
DEFAULT_POLL_S = 5.0
DEFAULT_GRACE_S = 30.0
DEFAULT_CONCURRENCY = 1
DEFAULT_TICK_BATCH = 100
DEFAULT_CATCHUP_LIMIT = 1000
# How far ahead of their time the ticker creates slots (pending, claimable only at their time), so
# that a burst of slots due at one moment is already in the table when it comes.
DEFAULT_LOOKAHEAD_S = 60.0
DEFAULT_CLAIM_BATCH = 100
DEFAULT_ASYNC_CONCURRENCY = 100
DEFAULT_ABANDON_AFTER_S = 30.0
# Built-in retention: finished runs older than this are removed by the tickers (a schedule's own
# `retention` wins); a pass over every schedule starts this often, deleting this many runs per step.
DEFAULT_RETENTION = timedelta(days=30)
DEFAULT_RETENTION_EVERY_S = 3600.0
DEFAULT_RETENTION_BATCH = 2000
# What retention removes leaves each slot's outcome behind in the slot ledger, 16 bytes a slot, kept
# this long (by the slot's age) so that `fleetctl verify` covers a year and a bit of every schedule.
DEFAULT_LEDGER_RETENTION = timedelta(days=400)
# How often one of the tickers rolls the finished runs up into the schedules' health stats.
DEFAULT_HEALTH_ROLLUP_S = 2.0
# Durations (lease, heartbeat, poll, grace) are finite and at most a week; a worker runs at most
# this many handlers at once (one thread each).
MAX_DURATION_S = 7 * 86400.0
MAX_CONCURRENCY = 1000
# `async def` runs share one event loop thread: a worker runs up to this many of them at once.
MAX_ASYNC_CONCURRENCY = 10_000
LOG_FORMATS = ("json", "text")

T = TypeVar("T")


@dataclass(frozen=True)
class TickerSettings:
    database_url: str | None
    poll_s: float
    batch_size: int
    catchup_limit: int
    lookahead_s: float
    until_idle: bool
    leader: bool
    ticker_id: str
    log_format: str
    prepared_statements: bool = True
    retention: timedelta | None = DEFAULT_RETENTION  # None: built-in retention off
    retention_every_s: float = DEFAULT_RETENTION_EVERY_S
    retention_batch: int = DEFAULT_RETENTION_BATCH
    health_rollup_s: float = DEFAULT_HEALTH_ROLLUP_S
    ledger_retention: timedelta | None = DEFAULT_LEDGER_RETENTION  # None: no outcome kept


@dataclass(frozen=True)
class WorkerSettings:
    database_url: str | None
    app: tuple[str, ...]
    jobs_file: str | None
    worker_id: str
    lease_s: float
    heartbeat_s: float
    poll_s: float
    concurrency: int
    claim_batch: int
    grace_s: float
    until_idle: bool
    log_format: str
    prepared_statements: bool = True
    debug: bool = False
    async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY
    abandon_after_s: float = DEFAULT_ABANDON_AFTER_S


def default_process_id(kind: str) -> str:
    """host-name plus the supervisord process name or pid: unique across hosts."""
    name = os.environ.get("SUPERVISOR_PROCESS_NAME") or f"{kind}-{os.getpid()}"
    return f"{socket.gethostname()}:{name}"


def _env_help(var: str, text: str) -> str:
    return f"{text} [env {var}]"


def _take(
    value: Any, environ: Mapping[str, str], var: str, default: T, cast: Callable[[str], T], flag: str
) -> T:
    raw = value if value is not None else environ.get(var)
    if raw is None or raw == "":
        return default
    try:
        return cast(raw) if isinstance(raw, str) else raw
    except (TypeError, ValueError):
        raise ConfigError(f"{flag}: invalid value {raw!r}") from None


# The most each count may be: past these a batch is a statement PostgreSQL refuses (bigint, memory)
# or a process that takes the whole machine.
_HIGHEST = {
    "--batch": 10_000,
    "--catchup-limit": 100_000,
    "--concurrency": 1_000,
    "--claim-batch": 10_000,
    "--async-concurrency": 10_000,
    "--retention-batch": 100_000,
}


def _positive(value: float, flag: str) -> float:
    if not value > 0:
        raise ConfigError(f"{flag}: must be positive, got {value}")
    high = _HIGHEST.get(flag)
    if high is not None and value > high:
        raise ConfigError(f"{flag}: must be at most {high}, got {value}")
    return value


def check_duration(value: float, flag: str, allow_zero: bool = False) -> float:
    """A number of seconds: positive (or zero where allowed), finite and at most a week."""
    if not (value >= 0 if allow_zero else value > 0):
        raise ConfigError(f"{flag}: must be {'zero or more' if allow_zero else 'positive'}, got {value}")
    if not value <= MAX_DURATION_S:
        raise ConfigError(f"{flag}: must be at most {MAX_DURATION_S:.0f} seconds (a week), got {value}")
    return value


def _retention(raw: str, flag: str = "--retention") -> timedelta | None:
    """`off`, or a duration from an hour to ten years (the bounds of a schedule's `retention`)."""
    if raw.strip().lower() == "off":
        return None
    try:
        d = parse_duration(raw, flag)
    except TimingError as e:
        raise ConfigError(f"{e}; or off") from None
    if not MIN_RETENTION <= d <= MAX_RETENTION:
        raise ConfigError(f"{flag}: must be from 1h to {MAX_RETENTION.days} days, or off; got {raw!r}")
    return d


def _bool(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def add_database_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help=_env_help(
            "FLEET_DATABASE_URL",
            "libpq URI of the database; unset: the embedded PostgreSQL of the `fleetctl up` running "
            "in this directory",
        ),
    )
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, help=_env_help("FLEET_LOG_FORMAT", "json (default) or text")
    )
    parser.add_argument(
        "--no-prepared-statements",
        dest="prepared_statements",
        action="store_false",
        default=None,
        help=_env_help(
            "FLEET_PREPARED_STATEMENTS",
            "do not prepare statements (PgBouncer in transaction mode without max_prepared_statements)",
        ),
    )


def _shared(a: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings every executable takes from add_database_flags, validated."""
    log_format = _take(a.log_format, environ, "FLEET_LOG_FORMAT", "json", str, "--log-format")
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format: must be one of {', '.join(LOG_FORMATS)}")
    url = _take(a.database_url, environ, "FLEET_DATABASE_URL", None, str, "--database-url")
    if url:
        url_params(url, "--database-url" if a.database_url else "FLEET_DATABASE_URL")
    return {
        "database_url": url,
        "log_format": log_format,
        "prepared_statements": _take(
            a.prepared_statements,
            environ,
            "FLEET_PREPARED_STATEMENTS",
            True,
            _bool,
            "--no-prepared-statements",
        ),
    }


def ticker_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fleet-ticker", description="Turn due schedule slots into run rows.")
    add_database_flags(p)
    p.add_argument("--until-idle", action="store_true", help="tick until nothing is due, then exit")
    p.add_argument(
        "--poll", type=float, help=_env_help("FLEET_TICKER_POLL", "longest sleep between ticks, s (5)")
    )
    p.add_argument(
        "--batch", type=int, help=_env_help("FLEET_TICKER_BATCH", "schedules per transaction (100)")
    )
    p.add_argument(
        "--catchup-limit",
        type=int,
        help=_env_help("FLEET_CATCHUP_LIMIT", "most slots one schedule may create per tick (1000)"),
    )
    p.add_argument(
        "--lookahead",
        type=float,
        metavar="SECONDS",
        help=_env_help(
            "FLEET_LOOKAHEAD",
            "create slots this long before their time, pending until it comes; 0: only when due, s (60)",
        ),
    )
    p.add_argument(
        "--leader",
        action="store_true",
        default=None,
        help=_env_help("FLEET_TICKER_LEADER", "tick only while holding the leader lock; others stand by"),
    )
    p.add_argument(
        "--health-rollup",
        type=float,
        help=_env_help(
            "FLEET_HEALTH_ROLLUP", "seconds between roll-ups of finished runs into the health stats (2)"
        ),
    )
    p.add_argument("--id", help=_env_help("FLEET_TICKER_ID", "ticker id (host:process)"))
    p.add_argument(
        "--retention",
        metavar="DURATION",
        help=_env_help(
            "FLEET_RETENTION",
            "remove done and skipped runs (with their attempts) that finished longer ago than this, "
            "unless their schedule sets its own retention; 1h to 3660d, or off (30d)",
        ),
    )
    p.add_argument(
        "--retention-every",
        type=float,
        metavar="S",
        help=_env_help(
            "FLEET_RETENTION_EVERY", "a retention pass over all schedules starts this often, s (3600)"
        ),
    )
    p.add_argument(
        "--retention-batch",
        type=int,
        metavar="N",
        help=_env_help("FLEET_RETENTION_BATCH", "most runs one retention step deletes (2000)"),
    )
    p.add_argument(
        "--ledger-retention",
        metavar="DURATION",
        help=_env_help(
            "FLEET_LEDGER_RETENTION",
            "keep the outcome of each slot whose run retention removed (16 bytes a slot, for "
            "`fleetctl verify`) until the slot is this old; 1h to 3660d, or off to keep none (400d)",
        ),
    )
    return p


def ticker_settings(argv: Sequence[str] | None, environ: Mapping[str, str]) -> TickerSettings:
    """Parse flags (argparse exits 2 on a bad flag) and validate them with their FLEET_* fallbacks."""
    a = ticker_parser().parse_args(argv)
    s = TickerSettings(
        poll_s=check_duration(
            _take(a.poll, environ, "FLEET_TICKER_POLL", DEFAULT_POLL_S, float, "--poll"), "--poll"
        ),
        batch_size=int(
            _positive(
                _take(a.batch, environ, "FLEET_TICKER_BATCH", DEFAULT_TICK_BATCH, int, "--batch"), "--batch"
            )
        ),
        catchup_limit=int(
            _positive(
                _take(
                    a.catchup_limit,
                    environ,
                    "FLEET_CATCHUP_LIMIT",
                    DEFAULT_CATCHUP_LIMIT,
                    int,
                    "--catchup-limit",
                ),
                "--catchup-limit",
            )
        ),
        lookahead_s=check_duration(
            _take(a.lookahead, environ, "FLEET_LOOKAHEAD", DEFAULT_LOOKAHEAD_S, float, "--lookahead"),
            "--lookahead",
            allow_zero=True,
        ),
        until_idle=a.until_idle,
        leader=_take(a.leader, environ, "FLEET_TICKER_LEADER", False, _bool, "--leader"),
        ticker_id=_take(a.id, environ, "FLEET_TICKER_ID", "", str, "--id") or default_process_id("ticker"),
        retention=_retention_setting(a.retention, environ),
        ledger_retention=_retention_setting(
            a.ledger_retention,
            environ,
            "FLEET_LEDGER_RETENTION",
            "--ledger-retention",
            DEFAULT_LEDGER_RETENTION,
        ),
        retention_every_s=check_duration(
            _take(
                a.retention_every,
                environ,
                "FLEET_RETENTION_EVERY",
                DEFAULT_RETENTION_EVERY_S,
                float,
                "--retention-every",
            ),
            "--retention-every",
        ),
        retention_batch=int(
            _positive(
                _take(
                    a.retention_batch,
                    environ,
                    "FLEET_RETENTION_BATCH",
                    DEFAULT_RETENTION_BATCH,
                    int,
                    "--retention-batch",
                ),
                "--retention-batch",
            )
        ),
        health_rollup_s=check_duration(
            _take(
                a.health_rollup,
                environ,
                "FLEET_HEALTH_ROLLUP",
                DEFAULT_HEALTH_ROLLUP_S,
                float,
                "--health-rollup",
            ),
            "--health-rollup",
        ),
        **_shared(a, environ),
    )
    return s


def _retention_setting(
    value: str | None,
    environ: Mapping[str, str],
    env: str = "FLEET_RETENTION",
    flag: str = "--retention",
    default: timedelta = DEFAULT_RETENTION,
) -> timedelta | None:
    raw = value if value is not None else environ.get(env)
    if raw is None or raw == "":
        return default
    return _retention(raw, flag)


def worker_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fleet-worker", description="Claim due runs under a lease and run their jobs.")
    add_database_flags(p)
    p.add_argument(
        "--app",
        action="append",
        help=_env_help("FLEET_APP", "module that registers jobs (repeatable; env: comma-separated)"),
    )
    p.add_argument("--jobs", help=_env_help("FLEET_JOBS_FILE", "TOML file declaring command jobs"))
    p.add_argument("--id", help=_env_help("FLEET_WORKER_ID", "worker id, unique across hosts (host:process)"))
    p.add_argument("--lease", type=float, help=_env_help("FLEET_LEASE", "lease length, s (60)"))
    p.add_argument(
        "--heartbeat", type=float, help=_env_help("FLEET_HEARTBEAT", "lease renewal period, s (lease/3)")
    )
    p.add_argument("--poll", type=float, help=_env_help("FLEET_POLL", "longest sleep between claims, s (5)"))
    p.add_argument(
        "--concurrency",
        type=int,
        help=_env_help("FLEET_CONCURRENCY", "runs of sync jobs executed at once, a thread each (1)"),
    )
    p.add_argument(
        "--async-concurrency",
        type=int,
        help=_env_help(
            "FLEET_ASYNC_CONCURRENCY", "`async def` runs executed at once on the worker's event loop (100)"
        ),
    )
    p.add_argument(
        "--claim-batch", type=int, help=_env_help("FLEET_CLAIM_BATCH", "most runs claimed at once (100)")
    )
    p.add_argument(
        "--grace", type=float, help=_env_help("FLEET_GRACE", "on SIGTERM, time running jobs get, s (30)")
    )
    p.add_argument(
        "--abandon-after",
        type=float,
        help=_env_help(
            "FLEET_ABANDON_AFTER",
            "a handler still running this long after its cancellation (timeout, lease lost) is abandoned:"
            " the worker stops claiming, then exits non-zero to be restarted, s (30)",
        ),
    )
    p.add_argument("--until-idle", action="store_true", help="exit when nothing is claimable")
    p.add_argument("--debug", action="store_true", help="show the traceback of an --app module that fails")
    return p


def worker_settings(argv: Sequence[str] | None, environ: Mapping[str, str]) -> WorkerSettings:
    """Parse flags (argparse exits 2 on a bad flag) and validate them with their FLEET_* fallbacks."""
    a = worker_parser().parse_args(argv)
    apps: tuple[str, ...] = tuple(
        a.app or [m.strip() for m in environ.get("FLEET_APP", "").split(",") if m.strip()]
    )
    lease = check_duration(
        _take(a.lease, environ, "FLEET_LEASE", DEFAULT_LEASE_S, float, "--lease"), "--lease"
    )
    heartbeat = check_duration(
        _take(a.heartbeat, environ, "FLEET_HEARTBEAT", lease / 3, float, "--heartbeat"), "--heartbeat"
    )
    if heartbeat >= lease:
        raise ConfigError(f"--heartbeat: must be shorter than the lease ({heartbeat} >= {lease})")
    s = WorkerSettings(
        app=apps,
        jobs_file=_take(a.jobs, environ, "FLEET_JOBS_FILE", None, str, "--jobs"),
        worker_id=_take(a.id, environ, "FLEET_WORKER_ID", "", str, "--id") or default_process_id("worker"),
        lease_s=lease,
        heartbeat_s=heartbeat,
        poll_s=check_duration(
            _take(a.poll, environ, "FLEET_POLL", DEFAULT_POLL_S, float, "--poll"), "--poll"
        ),
        concurrency=int(
            _positive(
                _take(a.concurrency, environ, "FLEET_CONCURRENCY", DEFAULT_CONCURRENCY, int, "--concurrency"),
                "--concurrency",
            )
        ),
        claim_batch=int(
            _positive(
                _take(a.claim_batch, environ, "FLEET_CLAIM_BATCH", DEFAULT_CLAIM_BATCH, int, "--claim-batch"),
                "--claim-batch",
            )
        ),
        grace_s=check_duration(
            _take(a.grace, environ, "FLEET_GRACE", DEFAULT_GRACE_S, float, "--grace"),
            "--grace",
            allow_zero=True,
        ),
        until_idle=a.until_idle,
        debug=a.debug,
        async_concurrency=int(
            _positive(
                _take(
                    a.async_concurrency,
                    environ,
                    "FLEET_ASYNC_CONCURRENCY",
                    DEFAULT_ASYNC_CONCURRENCY,
                    int,
                    "--async-concurrency",
                ),
                "--async-concurrency",
            )
        ),
        abandon_after_s=check_duration(
            _take(
                a.abandon_after,
                environ,
                "FLEET_ABANDON_AFTER",
                DEFAULT_ABANDON_AFTER_S,
                float,
                "--abandon-after",
            ),
            "--abandon-after",
        ),
        **_shared(a, environ),
    )
    if s.async_concurrency > MAX_ASYNC_CONCURRENCY:
        raise ConfigError(
            f"--async-concurrency: must be at most {MAX_ASYNC_CONCURRENCY}, got {s.async_concurrency}"
        )
    if s.concurrency > MAX_CONCURRENCY:
        raise ConfigError(f"--concurrency: must be at most {MAX_CONCURRENCY}, got {s.concurrency}")
    if not s.app and not s.jobs_file:
        raise ConfigError("--app: give at least one module that registers jobs (or --jobs FILE)")
    return s
