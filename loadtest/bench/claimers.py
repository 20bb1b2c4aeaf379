"""Claimers: 4, 16 and 64 worker processes draining the same backlog. Throughput must not collapse as
claimers are added; the database connections each worker holds are counted from pg_stat_activity,
and a fleet that needs more than the server allows drains through PgBouncer. While each drain runs,
what the workers' sessions wait on is sampled, to say where the time goes."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from fleet.store.db import connect
from fleet.store.queries import STATEMENTS
from loadtest.bench import bouncer
from loadtest.bench.backlog import add_schedule
from loadtest.bench.config import Bench
from loadtest.bench.drain import FleetDrain
from loadtest.bench.report import Report, median
from loadtest.bench.server import dbname
from loadtest.bench.trial import Trial

# A worker's pool of two (claim and finish, heartbeat) and its LISTEN session; checked against
# pg_stat_activity while the workers drain.
WORKER_CONNECTIONS = 3
OWN_CONNECTIONS = 5  # the benchmark's own: monitor, sampler, load, admin, and one to spare


@dataclass(frozen=True)
class Capacity:
    """The server's connection slots: max_connections, those reserved for superusers, and those in use."""

    max_connections: int
    reserved: int
    in_use: int

    @property
    def free(self) -> int:
        return self.max_connections - self.reserved - self.in_use

    def fits(self, workers: int, per_worker: int = WORKER_CONNECTIONS) -> bool:
        return workers * per_worker + OWN_CONNECTIONS <= self.free


def capacity(conn: psycopg.Connection[Any]) -> Capacity:
    row = conn.execute(
        "SELECT current_setting('max_connections')::int AS max, "
        "current_setting('superuser_reserved_connections')::int AS reserved, "
        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS in_use"
    ).fetchone()
    assert row is not None
    return Capacity(int(row["max"]), int(row["reserved"]), int(row["in_use"]))


def worker_of(application_name: str) -> str | None:
    """The worker id of a fleet-worker's session ('fleet-worker ID' or 'fleet-worker ID listen')."""
    prefix = "fleet-worker "
    if not application_name.startswith(prefix):
        return None
    rest = application_name[len(prefix) :]
    return rest.removesuffix(" listen") or None


def _words(sql: str) -> str:
    return " ".join(sql.split())


# Each named statement's text up to its first parameter: what pg_stat_activity shows of it.
_PREFIXES = sorted(
    ((_words(re.split(r"%\(|\$\d", text)[0])[:80], name) for name, text in STATEMENTS.items()),
    key=lambda pn: -len(pn[0]),
)


def statement_of(query: str | None) -> str:
    """The name of fleet's statement a session runs (fleet/sql), else the query's first words."""
    text = _words(query or "")
    for prefix, name in _PREFIXES:
        if prefix and text.startswith(prefix):
            return name
    return " ".join(text.split()[:3]) or "?"


def wait_label(wait_event_type: str | None, wait_event: str | None) -> str:
    """What an active session is doing: its wait event, or CPU when it waits on nothing."""
    return f"{wait_event_type}:{wait_event}" if wait_event_type else "CPU"


def activity_label(row: Mapping[str, Any]) -> str:
    """An active session's statement and what it waits on, and for a lock, whose statement holds it."""
    label = f"{statement_of(row['query'])} {wait_label(row['wtype'], row['wevent'])}"
    if row["wtype"] == "Lock" and row.get("blocker") is not None:
        label += f" held by {statement_of(row['blocker'])}"
    return label


def shares(counts: Mapping[str, int], top: int = 4) -> str:
    """The `top` commonest labels with their share of all samples, commonest first."""
    total = sum(counts.values())
    if not total:
        return "no active session sampled"
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return ", ".join(f"{label} {n / total:.0%}" for label, n in ranked)


class Activity:
    """Samples one database's sessions until stopped: the most sessions seen (all, and per worker)
    and, for active sessions, what they wait on."""

    SQL = (
        "SELECT a.application_name AS app, a.backend_start AS started, a.state, a.wait_event_type AS wtype, "
        "a.wait_event AS wevent, a.query, CASE WHEN a.wait_event_type = 'Lock' THEN (SELECT b.query FROM pg_stat_activity b "
        "WHERE b.pid = (pg_blocking_pids(a.pid))[1]) END AS blocker "
        "FROM pg_stat_activity a WHERE a.datname = %s AND a.backend_type = 'client backend' "
        "AND a.application_name NOT LIKE 'fleet-bench%%'"
    )

    def __init__(self, admin_url: str, database: str, every_s: float = 0.25) -> None:
        self.admin_url = admin_url
        self.database = database
        self.every_s = every_s
        self.peak = 0  # sessions of the database at once
        self.per_worker = 0  # sessions of one worker at once, the most of any worker
        # When sampling began (the server's clock). A worker's sessions are those opened since: a
        # pooler's server sessions opened in an earlier trial carry the application_name of the
        # last client they served, and would be counted as one more session of that worker.
        self.since: datetime | None = None
        self.waits: Counter[str] = Counter()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-activity", daemon=True)

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """One sample's rows."""
        rows = list(rows)
        self.peak = max(self.peak, len(rows))
        workers = Counter(
            w
            for r in rows
            if (w := worker_of(str(r["app"] or ""))) is not None
            and (self.since is None or r["started"] is None or r["started"] >= self.since)
        )
        self.per_worker = max(self.per_worker, *workers.values(), 0)
        self.waits.update(activity_label(r) for r in rows if r["state"] == "active")

    def _run(self) -> None:
        with connect(self.admin_url, "fleet-bench activity") as conn:
            row = conn.execute("SELECT statement_timestamp() AS t").fetchone()
            self.since = row["t"] if row else None
            while not self._halt.wait(self.every_s):
                self.add(conn.execute(self.SQL, (self.database,)).fetchall())

    def __enter__(self) -> Activity:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(10)


class SampledDrain(FleetDrain):
    """A fleet drain whose trials sample the database's sessions (Activity) while they run."""

    def __init__(self, admin_url: str, url: str, workers: int, **kw: Any) -> None:
        super().__init__(url, workers, **kw)
        self.admin_url = admin_url
        self.activity: list[Activity] = []

    def trial(self, bench: Bench, n: int) -> Trial:
        with Activity(self.admin_url, dbname(self.url)) as activity:
            t = super().trial(bench, n)
        self.activity.append(activity)
        return t


def run(bench: Bench, report: Report) -> None:
    counts = sorted(set(bench.opts.claimers))
    n = bench.opts.backlog
    url = bench.server.database("claimers")
    with connect(url, "fleet-bench") as conn:
        add_schedule(conn)
        cap = capacity(conn)
    admin = bench.server.url
    direct = [w for w in counts if cap.fits(w)]
    over = [w for w in counts if w not in direct]
    setting = f"pool_mode = transaction, default_pool_size = {bouncer.POOL_SIZE}"
    with ExitStack() as stack:
        contenders = [
            SampledDrain(admin, url, w, key=f"direct.w{w}", label=f"{w} worker processes, direct")
            for w in direct
        ]
        if over and bouncer.PGBOUNCER is not None:
            # The whole series through PgBouncer too: the largest count is compared with the others on
            # one path, so the proxy's own cost is not taken for the claimers'.
            through = stack.enter_context(bouncer.bouncer(bench, url, max(counts) * WORKER_CONNECTIONS + 50))
            contenders += [
                SampledDrain(
                    admin,
                    url,
                    w,
                    key=f"pgbouncer.w{w}",
                    label=f"{w} worker processes, through PgBouncer",
                    worker_url=through,
                    flags=bouncer.WORKER_FLAGS,
                )
                for w in counts
            ]
        trials: dict[str, list[Trial]] = {c.key: [] for c in contenders}
        for rep in range(bench.opts.repeat):
            for c in contenders:
                t = c.trial(bench, n)
                trials[c.key].append(t)
                print(f"  claimers {c.key} #{rep + 1}: {t.rate:,.0f} runs/s", flush=True)
    rates = {c.key: median([t.rate for t in trials[c.key]]) for c in contenders}
    for c in contenders:
        report.add(
            f"claimers.{c.key}",
            f"claimers: drain {n:,} no-op runs, {c.label}",
            rates[c.key],
            "runs/s",
            trials=[t.rate for t in trials[c.key]],
        )
    measured = [a.per_worker for c in contenders if c.worker_url == c.url for a in c.activity]
    per_worker = max(measured) if measured else None
    report.add(
        "claimers.connections_per_worker",
        "claimers: database connections per worker process (most seen in pg_stat_activity, direct)",
        float(per_worker) if per_worker is not None else None,
        "connections",
    )
    report.add(
        "claimers.max_connections",
        f"claimers: the server's max_connections ({cap.reserved} reserved for superusers, {cap.in_use} in "
        "use before the drains)",
        float(cap.max_connections),
        "connections",
    )
    for w in over:
        how = (
            f"drained through PgBouncer ({setting})"
            if bouncer.PGBOUNCER
            else "not measured: pgbouncer not installed"
        )
        report.add(
            f"claimers.needed.w{w}",
            f"claimers: {w} workers need {w} x {per_worker or WORKER_CONNECTIONS} connections, more than the "
            f"server's {cap.free} free: {how}",
            float(w * (per_worker or WORKER_CONNECTIONS)),
            "connections",
        )
    for c in contenders:
        if c.worker_url != c.url:
            report.add(
                f"claimers.{c.key}.server_connections",
                f"claimers: server connections PgBouncer used for {c.processes} workers (most seen)",
                float(max(a.peak for a in c.activity)),
                "connections",
            )
    waits = "; ".join(f"{c.key}: {shares(sum((a.waits for a in c.activity), Counter()))}" for c in contenders)
    report.note(
        f"claimers: {', '.join(map(str, counts))} fleet-worker processes (the drain's flags) drain one "
        f"backlog of {n:,} no-op runs, as in the drain; counts whose connections ({WORKER_CONNECTIONS} a "
        f"worker) do not fit in the server's free connection slots less {OWN_CONNECTIONS} run through "
        f"PgBouncer ({setting}, workers with {' '.join(bouncer.WORKER_FLAGS)}), and then every count "
        "does, so the largest is compared with the others on one path. pg_stat_activity is sampled "
        "every 0.25 s during each drain: connections per worker by application_name, and the statement "
        "each active session ran, what it waited on, and for a lock the statement of the session "
        f"holding it (share of samples): {waits}"
    )
