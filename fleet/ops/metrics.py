"""`fleetctl metrics`: health numbers and counters in the Prometheus text format, from the database.

Workers are many processes on many hosts; the database is the one place that knows everything, so
one collector computes every metric from it at scrape time. Gauges are read as they are now. The
counters and histograms belong to this exporter process, like any Prometheus counter: they start
at zero when it starts and grow by the runs that finished since the previous scrape (read through
the index on `finished_at`), so `fleetctl prune` deleting rows never makes them go down.
"""

from __future__ import annotations

import argparse
import bisect
import ipaddress
import os
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg

from fleet.errors import DatabaseUnavailable, UsageError
from fleet.health import verdicts
from fleet.health.reading import HEALTH_FIELDS, health_rows
from fleet.health.verdicts import FleetHealth
from fleet.observe import logs
from fleet.ops.httpd import MAX_CONNECTIONS, Credentials, credentials_from
from fleet.ops.metrics_server import DEFAULT_INTERVAL_S, Exposition, MetricsServer, tls_context
from fleet.ops.status import live_processes
from fleet.process.signals import on_stop_signal
from fleet.store.db import connect, redact, resolve_url
from fleet.store.queries import q
from fleet.store.registry import CRASH_RECENT_S

DEFAULT_LISTEN = "127.0.0.1:9464"
# A run is counted once its finish is this old: a finish stamped with its transaction's start time
# commits a moment later, and must not fall behind a window already read.
SETTLE_S: Final = 2.0
LATENCY_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
)
LAG_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
FINISHED_STATUSES: Final = ("done", "dead", "skipped")
# Schedules per piece of a per-schedule family, which is written again only when its values change.
SAMPLE_CHUNK: Final = 2000
_STATEMENT_TIMEOUT_MS: Final = 10_000
_UP_HELP: Final = "1 when this scrape could read the database"


@dataclass
class Histogram:
    """Cumulative-bucket histogram state for one label set."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


def _columns(chunks: Iterable[list[tuple[Any, ...]]]) -> dict[str, list[Any]]:
    """The schedules' health by field (`HEALTH_FIELDS`): each field's values, in the rows' order,
    turned into columns a chunk at a time as the read yields them."""
    columns: list[list[Any]] = [[] for _ in HEALTH_FIELDS]
    for chunk in chunks:
        for column, values in zip(columns, zip(*chunk, strict=True), strict=True):
            column.extend(values)
    return dict(zip(HEALTH_FIELDS, columns, strict=True))


class FleetCollector:
    """Everything `fleetctl metrics` exports, computed from the database on each `render`.

    The text is written here rather than through prometheus_client's objects: at 100,000 schedules
    the exposition holds about two million series, which those objects took 18 s to build."""

    def __init__(self, url: str, settle_s: float = SETTLE_S, chunk: int = SAMPLE_CHUNK) -> None:
        self.url = url
        self.chunk = chunk  # schedules per piece of a per-schedule family
        self.settle = timedelta(seconds=settle_s)
        self.lock = threading.Lock()
        self.conn: psycopg.Connection[Any] | None = None
        self.since: datetime | None = None  # counters hold the runs finished up to here
        self.runs: Counter[tuple[str, str]] = Counter()
        self.attempts: Counter[tuple[str, str]] = Counter()
        self.reclaims: Counter[str] = Counter()
        self.claim_latency: dict[str, Histogram] = {}
        self.start_lag: dict[str, Histogram] = {}
        # The schedules of the previous render, their labels, and each per-schedule family's values
        # and samples then, in pieces of `chunk` schedules: a piece whose values did not
        # change is not written again (at 100,000 schedules a family holds 100,000 lines or more,
        # and between two scrapes most pieces of most families stay the same).
        self._names: list[str] = []
        self._labels: list[str] = []
        self._written: dict[str, list[tuple[list[Any], bytes]]] = {}
        # the float families' line templates, by family and first schedule of their piece
        self._templates: dict[tuple[str, int], tuple[list[bool], str]] = {}
        # Finished runs counted so far, and as of the last computation: the run counters' families
        # are not read again while no run was counted.
        self._counted = 0
        self._counted_before = 0

    def _samples(self, family: str, values: list[Any], write: Callable[[int, int], str]) -> list[bytes]:
        """The samples of a per-schedule family of these values (one per schedule, in the labels'
        order), in pieces of `chunk` schedules: a piece whose values are the same as last
        time is the text written then, else `write(lo, hi)` writes the schedules lo to hi."""
        last = self._written.get(family, [])
        pieces: list[tuple[list[Any], bytes]] = []
        for i, lo in enumerate(range(0, len(values), self.chunk)):
            part = values[lo : lo + self.chunk]
            if i < len(last) and last[i][0] == part:
                pieces.append(last[i])
            else:
                pieces.append((part, write(lo, lo + len(part)).encode()))
        self._written[family] = pieces
        return [text for _, text in pieces]

    def _counter_samples(
        self, family: str, values: Callable[[], list[Any]], write: Callable[[list[Any], int, int], str]
    ) -> list[bytes]:
        """`_samples` for a family of the run counters, whose values change only when runs are counted."""
        last = self._written.get(family)
        if last is not None and self._counted == self._counted_before:
            return [text for _, text in last]
        got = values()
        return self._samples(family, got, lambda lo, hi: write(got, lo, hi))

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.url, "fleetctl metrics")
            self.conn.execute(
                "SELECT set_config('statement_timeout', %s, false)", (str(_STATEMENT_TIMEOUT_MS),)
            )
        return self.conn

    def _advance(self, conn: psycopg.Connection[Any]) -> None:
        """Add the runs that finished since the previous scrape to the counters."""
        clock = conn.execute(q("clock_read"), {"now": None}).fetchone()
        assert clock is not None
        until: datetime = clock["now"] - self.settle
        if self.since is None:
            self.since = until  # counting starts with this process
            return
        if until <= self.since:
            return
        for r in conn.execute(q("run_finished_between"), {"since": self.since, "until": until}):
            name = r["schedule_name"]
            self.runs[(name, r["status"])] += 1
            self._counted += 1
            for outcome in r["outcomes"]:
                self.attempts[(name, outcome)] += 1
                if outcome == "lease_expired":
                    self.reclaims[name] += 1
            if r["claim_latency_s"] is not None and r["claim_latency_s"] >= 0:
                self.claim_latency.setdefault(name, Histogram(LATENCY_BUCKETS)).observe(r["claim_latency_s"])
            if r["start_lag_s"] is not None and r["origin"] != "backfill":
                self.start_lag.setdefault(name, Histogram(LAG_BUCKETS)).observe(max(0.0, r["start_lag_s"]))
        self.since = until

    def render(self) -> bytes:
        """The exposition, in the Prometheus text format (0.0.4)."""
        return b"".join(self.parts())

    def parts(self) -> list[bytes]:
        """`render`'s text in parts, as `Exposition` serves it: the families whose samples did not
        change are the bytes written for them before, not copies."""
        with self.lock:
            started = time.monotonic()
            try:
                conn = self._connection()
                seen: list[FleetHealth] = []
                schedules = _columns(health_rows(conn, fleet=seen))
                fleet = seen[0]
                processes = live_processes(conn)
                self._advance(conn)
            except (psycopg.Error, DatabaseUnavailable) as e:
                logs.event("metrics_scrape_failed", error=str(e).strip()[:300])
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                return [*_family("fleet_database_up", "gauge", _UP_HELP, "fleet_database_up 0.0\n")]
            out = [*_family("fleet_database_up", "gauge", _UP_HELP, "fleet_database_up 1.0\n")]
            by_verdict = Counter(schedules["verdict"])
            out.extend(
                _family(
                    "fleet_schedules",
                    "gauge",
                    "schedules by verdict: one alert on the unhealthy ones, whatever their number",
                    "".join(
                        f'fleet_schedules{{verdict="{v}"}} {_num(by_verdict[v])}\n' for v in verdicts.SEVERITY
                    ),
                )
            )
            names = schedules["name"]
            if names != self._names:
                self._names, self._written, self._templates = names, {}, {}
                self._labels = [f'{{schedule="{_label(n)}"}} ' for n in names]
            labels = self._labels
            out.extend(self._health(schedules, labels))
            kinds = Counter(p["kind"] for p in processes)
            out.extend(
                _family(
                    "fleet_processes",
                    "gauge",
                    "live tickers and workers",
                    "".join(
                        f'fleet_processes{{kind="{k}"}} {_num(kinds[k])}\n' for k in ("ticker", "worker")
                    ),
                )
            )
            out.extend(_fleet(fleet, schedules))
            out.extend(self._counters(names, labels))
            took = time.monotonic() - started
            out.extend(
                _family(
                    "fleet_scrape_duration_seconds",
                    "gauge",
                    "time this scrape spent reading the database",
                    f"fleet_scrape_duration_seconds {_num(took)}\n",
                )
            )
            return out

    def _health(self, schedules: dict[str, list[Any]], labels: list[str]) -> Iterator[bytes]:
        def gauge(
            name: str, doc: str, key: str, kind: type = float, default: float | None = None
        ) -> list[bytes]:
            # The values are finite: a float's repr, an int's digits with ".0" (as a float's repr)
            # and a bool's 1.0 or 0.0 are the text format's numbers, written without a call each.
            values = schedules[key]
            if default is not None:
                values = [default if v is None else v for v in values]

            def write(lo: int, hi: int) -> str:
                pairs = zip(labels[lo:hi], values[lo:hi], strict=True)
                if kind is bool:
                    return "".join([f"{name}{label}{_ONE if v else _ZERO}\n" for label, v in pairs])
                if kind is int:
                    return "".join([f"{name}{label}{v}.0\n" for label, v in pairs if v is not None])
                # the durations change at every computation: a piece's lines are one template,
                # filled by one %-format, made again only when which schedules have a value changes
                present = [v is not None for v in values[lo:hi]]
                known = self._templates.get((name, lo))
                if known is None or known[0] != present:
                    stems = [f"{name}{label}" for label, p in zip(labels[lo:hi], present, strict=True) if p]
                    # no "%" to escape: schedule names cannot hold one (the schema checks them)
                    template = "".join([f"{stem}%r\n" for stem in stems])
                    known = self._templates[(name, lo)] = (present, template)
                return known[1] % tuple([float(v) for v in values[lo:hi] if v is not None])

            return _family(name, "gauge", doc, self._samples(name, values, write))

        yield from gauge(
            "fleet_schedule_healthy",
            "1 when the verdict is healthy: OK, RETRYING, PAUSED, DISABLED or ENDED",
            "healthy",
            bool,
        )

        def verdict_lines(lo: int, hi: int) -> str:
            # one line per schedule and verdict: the schedule's label with each verdict added
            lines: list[str] = []
            for label, current in zip(labels[lo:hi], current_verdicts[lo:hi], strict=True):
                stem = "fleet_schedule_verdict" + label[:-2]
                lines.extend(
                    f'{stem},verdict="{v}"}} {_ONE if v == current else _ZERO}\n' for v in verdicts.SEVERITY
                )
            return "".join(lines)

        current_verdicts = schedules["verdict"]
        yield from _family(
            "fleet_schedule_verdict",
            "gauge",
            "1 for the schedule's current verdict, 0 for the others",
            self._samples("fleet_schedule_verdict", current_verdicts, verdict_lines),
        )
        yield from gauge(
            "fleet_schedule_since_last_success_seconds",
            "time since the newest successful run finished (absent when none did)",
            "since_last_success_s",
        )
        yield from gauge(
            "fleet_schedule_quiet_seconds",
            "time since the last success, or since the schedule was created, changed or resumed if "
            "later: LATE when above 2 intervals",
            "quiet_s",
        )
        yield from gauge(
            "fleet_schedule_interval_seconds", "the schedule's own cadence around now", "interval_s"
        )
        yield from gauge(
            "fleet_schedule_dead_runs",
            "dead runs waiting for an operator's retry or discard",
            "dead_runs",
            int,
        )
        yield from gauge(
            "fleet_schedule_oldest_pending_age_seconds",
            "how long the oldest due pending run has waited (0 when none waits)",
            "oldest_pending_age_s",
            default=0.0,
        )
        yield from gauge("fleet_schedule_pending_runs", "pending runs that are due", "pending_runs", int)
        yield from gauge("fleet_schedule_running_runs", "runs held by a worker now", "running_runs", int)
        yield from gauge(
            "fleet_schedule_unserved_runs",
            "open runs whose job no live worker registered",
            "unserved_runs",
            int,
        )
        yield from gauge(
            "fleet_schedule_retrying_runs",
            "runs waiting out a retry back-off after a failed attempt (RETRYING); under overlap skip "
            "the schedule's later slots are skipped meanwhile",
            "retrying_runs",
            int,
        )
        yield from gauge(
            "fleet_schedule_broken",
            "1 when the schedule's timing cannot be evaluated (BROKEN): the ticker skips it",
            "broken_at",
            bool,
        )
        yield from gauge("fleet_schedule_paused", "1 when paused by an operator", "paused", bool)
        yield from gauge(
            "fleet_schedule_enabled",
            "0 once the schedules file no longer has it (apply --prune)",
            "enabled",
            bool,
        )
        name = "fleet_schedule_next_run_timestamp_seconds"
        next_runs = schedules["next_run_at"]

        def next_run_lines(lo: int, hi: int) -> str:
            pairs = zip(labels[lo:hi], next_runs[lo:hi], strict=True)
            return "".join([f"{name}{label}{at.timestamp()!r}\n" for label, at in pairs if at is not None])

        yield from _family(
            name, "gauge", "the next slot, Unix time", self._samples(name, next_runs, next_run_lines)
        )

    def _counters(self, names: list[str], labels: list[str]) -> Iterator[bytes]:
        name = "fleet_runs_finished_total"
        runs = self.runs

        def finished() -> list[tuple[int, ...]]:
            return [tuple([runs[(n, status)] for status in FINISHED_STATUSES]) for n in names]

        def finished_lines(counts: list[tuple[int, ...]], lo: int, hi: int) -> str:
            return "".join(
                [
                    f'{name}{label[:-2]},status="{status}"}} {count}.0\n'
                    for label, each in zip(labels[lo:hi], counts[lo:hi], strict=True)
                    for status, count in zip(FINISHED_STATUSES, each, strict=True)
                ]
            )

        yield from _family(
            name,
            "counter",
            "runs that finished since this exporter started, by status",
            self._counter_samples(name, finished, finished_lines),
        )
        name = "fleet_attempts_total"
        yield from _family(
            name,
            "counter",
            "attempts of the runs that finished since this exporter started, by outcome",
            "".join(
                f'{name}{{outcome="{_label(outcome)}",schedule="{_label(n)}"}} {_num(count)}\n'
                for (n, outcome), count in sorted(self.attempts.items())
            ),
        )

        def reclaims() -> list[int]:
            return [self.reclaims[n] for n in names]

        def reclaim_lines(counts: list[int], lo: int, hi: int) -> str:
            pairs = zip(labels[lo:hi], counts[lo:hi], strict=True)
            return "".join([f"fleet_reclaims_total{label}{count}.0\n" for label, count in pairs])

        yield from _family(
            "fleet_reclaims_total",
            "counter",
            "attempts whose lease ran out and whose run another worker took over",
            self._counter_samples("fleet_reclaims_total", reclaims, reclaim_lines),
        )
        self._counted_before = self._counted
        for metric, doc, hists in (
            (
                "fleet_claim_latency_seconds",
                "from a run becoming due to its last attempt's claim",
                self.claim_latency,
            ),
            (
                "fleet_start_lag_seconds",
                "from the slot time (plus its spread offset) to the first start (backfills excluded)",
                self.start_lag,
            ),
        ):
            lines: list[str] = []
            for n, hist in sorted(hists.items()):
                schedule = _label(n)
                buckets = hist.buckets()
                lines.extend(
                    f'{metric}_bucket{{le="{le}",schedule="{schedule}"}} {_num(count)}\n'
                    for le, count in buckets
                )
                lines.append(f'{metric}_count{{schedule="{schedule}"}} {_num(buckets[-1][1])}\n')
                lines.append(f'{metric}_sum{{schedule="{schedule}"}} {_num(hist.total)}\n')
            yield from _family(metric, "histogram", doc, "".join(lines))


_ONE, _ZERO = "1.0", "0.0"
# The longest broken error a label carries (the whole one is in `fleetctl status`).
BROKEN_ERROR_LABEL: Final = 200


def _fleet(fleet: FleetHealth, schedules: dict[str, list[Any]]) -> Iterator[bytes]:
    """The fleet-wide families: its tickers (NO-TICKER, TICKER-CRASHING) and its broken schedules."""
    yield from _family(
        "fleet_tickers_live",
        "gauge",
        "tickers seen within the staleness limit: 0 while schedules expect slots is NO-TICKER",
        f"fleet_tickers_live {_num(fleet.live_tickers)}\n",
    )
    if fleet.last_ticker is not None:
        yield from _family(
            "fleet_ticker_last_seen_seconds",
            "gauge",
            "time since any ticker was last seen (absent when no ticker row is left)",
            f"fleet_ticker_last_seen_seconds {_num(fleet.last_ticker.seen_s_ago)}\n",
        )
    yield from _family(
        "fleet_tickers_crashing",
        "gauge",
        f"tickers that recorded an unexpected error in the last {CRASH_RECENT_S} s (TICKER-CRASHING)",
        f"fleet_tickers_crashing {_num(fleet.crashed_tickers)}\n",
    )
    yield from _family(
        "fleet_ticker_crashes",
        "gauge",
        "unexpected errors recorded by the tickers whose registry rows remain (a clean stop removes its row)",
        f"fleet_ticker_crashes {_num(fleet.crashes)}\n",
    )
    broken = [
        (name, error)
        for name, at, error in zip(
            schedules["name"], schedules["broken_at"], schedules["broken_error"], strict=True
        )
        if at is not None
    ]
    yield from _family(
        "fleet_schedules_broken",
        "gauge",
        "schedules whose timing cannot be evaluated (BROKEN)",
        f"fleet_schedules_broken {_num(len(broken))}\n",
    )
    yield from _family(
        "fleet_schedule_broken_info",
        "gauge",
        f"1 per broken schedule, with its error (its first {BROKEN_ERROR_LABEL} characters)",
        "".join(
            f'fleet_schedule_broken_info{{error="{_label((error or "")[:BROKEN_ERROR_LABEL])}",'
            f'schedule="{_label(name)}"}} 1.0\n'
            for name, error in broken
        ),
    )


def _num(value: float) -> str:
    """A sample's value as the text format writes it (Python's float repr; +Inf, -Inf, NaN)."""
    v = float(value)
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _label(value: str) -> str:
    """A label value escaped as the text format requires."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _family(name: str, kind: str, doc: str, samples: str | list[bytes]) -> list[bytes]:
    """One metric family: its HELP and TYPE lines, and its samples (kept apart, as the pieces they
    were written in: a family of many samples is sent as it is kept, never copied)."""
    help_text = doc.replace("\\", "\\\\").replace("\n", "\\n")
    head = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n".encode()
    return [head, samples.encode()] if isinstance(samples, str) else [head, *samples]


def _timestamp(at: datetime | None) -> float | None:
    return None if at is None else at.timestamp()


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` (all interfaces) or ``PORT`` (127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    elif host == "":
        host = "0.0.0.0"
    host = host.removeprefix("[").removesuffix("]")
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"--listen: expected HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise UsageError(f"--listen: port out of range in {text!r}")
    return host, number


OPEN = Credentials()


def serve(
    url: str,
    host: str,
    port: int,
    stop: threading.Event,
    settle_s: float = SETTLE_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    access: Credentials = OPEN,
    tls: ssl.SSLContext | None = None,
    max_connections: int = MAX_CONNECTIONS,
) -> int:
    """Serve /metrics on host:port until `stop` is set, reading the database once per `interval_s`."""
    exposition = Exposition(FleetCollector(url, settle_s).parts, interval_s)
    try:
        server = MetricsServer((host, port), exposition, access, tls, max_connections)
    except OSError as e:
        raise UsageError(f"--listen: cannot listen on {host}:{port}: {e.strerror}") from None
    refresher = threading.Thread(
        target=exposition.refresh_forever, args=(stop,), name="metrics-refresh", daemon=True
    )
    refresher.start()
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    bound = server.server_address[1]
    scheme = "https" if tls else "http"
    shown = f"[{host}]" if ":" in host else host
    logs.event(
        "metrics_started",
        listen=f"{host}:{bound}",
        database=redact(url),
        tls=tls is not None,
        auth=access.any,
        interval_s=interval_s,
    )
    if not access.any and not _loopback(host):
        logs.event(
            "metrics_unauthenticated",
            listen=f"{host}:{bound}",
            hint="anyone who reaches this address reads every schedule's name and health: set "
            "FLEET_METRICS_BASIC_AUTH or FLEET_METRICS_TOKEN, or listen on 127.0.0.1",
        )
    print(f"serving metrics on {scheme}://{shown}:{bound}/metrics", flush=True)
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        refresher.join(5)
        logs.event("metrics_stopped")
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _access_from_env() -> Credentials:
    return credentials_from(os.environ, "FLEET_METRICS_TOKEN", "FLEET_METRICS_BASIC_AUTH")


def cmd_metrics(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen)
    if not 0.5 <= args.interval <= 3600:
        raise UsageError("--interval: between 0.5 and 3600 seconds")
    if not 1 <= args.max_connections <= 1024:
        raise UsageError("--max-connections: between 1 and 1024")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert: give both --tls-cert and --tls-key")
    tls = None
    if args.tls_cert:
        try:
            tls = tls_context(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"--tls-cert: cannot load the certificate and key: {e}") from None
    access = _access_from_env()
    url = resolve_url(args.database_url or os.environ.get("FLEET_DATABASE_URL") or None)
    stop = threading.Event()
    # Its log's reader gone (`fleetctl metrics | head -1`), it stops as on SIGTERM.
    log_format = args.log_format or os.environ.get("FLEET_LOG_FORMAT") or "json"
    logs.configure(log_format, on_output_gone=stop.set, process="metrics")
    on_stop_signal(lambda _sig: stop.set())
    return logs.exit_code(
        serve(
            url,
            host,
            port,
            stop,
            interval_s=args.interval,
            access=access,
            tls=tls,
            max_connections=args.max_connections,
        )
    )


def add_commands(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "metrics",
        help="serve Prometheus metrics computed from the database",
        description="Serves /metrics in the Prometheus text format until stopped: per schedule the health "
        "numbers (fleet_schedule_*), live processes, and counters of finished runs, attempts, reclaims, "
        "claim latency and start lag since this exporter started. Run one per fleet.",
    )
    p.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"where to serve ({DEFAULT_LISTEN})"
    )
    p.add_argument(
        "--log-format", choices=("json", "text"), help="json (default) or text [env FLEET_LOG_FORMAT]"
    )
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help=f"read the database at most once per S seconds; scrapes in between share the "
        f"result ({DEFAULT_INTERVAL_S:g})",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        metavar="N",
        help=f"connections held at once; more are closed at once, with a 503 unless TLS ({MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate (with --tls-key)"
    )
    p.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    p.epilog = (
        "Scrapers must authenticate when FLEET_METRICS_BASIC_AUTH (USER:PASSWORD) or "
        "FLEET_METRICS_TOKEN (a bearer token of 16 or more characters) is set."
    )
    return {"metrics": cmd_metrics}
