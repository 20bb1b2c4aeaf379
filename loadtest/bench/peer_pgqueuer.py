"""pgqueuer beside fleet: `pgq run` worker processes draining the same backlog (batch 10 and 100),
and an every-second schedule. The factories below are what `pgq run` imports."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job, Schedule
from pgqueuer.queries import Queries
from psycopg.conninfo import conninfo_to_dict

from fleet.store.db import connect
from loadtest.bench import stamps
from loadtest.bench.config import Bench
from loadtest.bench.procs import BIN, Proc, env_for
from loadtest.bench.server import checkpoint, pg_env
from loadtest.bench.trial import Trial, drain_trial

ENTRYPOINT = "noop"
CRON_EVERY_SECOND = "* * * * * *"


@asynccontextmanager
async def drain_app() -> AsyncIterator[PgQueuer]:
    """A consumer of no-op jobs (libpq environment variables name the database)."""
    conn = await asyncpg.connect()
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        return None

    try:
        yield pgq
    finally:
        await conn.close()


@asynccontextmanager
async def lag_app() -> AsyncIterator[PgQueuer]:
    """An every-second schedule that records when it starts. pgqueuer hands the handler the schedule
    row as updated when it was picked, whose next_run is the slot of the next firing."""
    conn = await asyncpg.connect()
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.schedule("stamp", CRON_EVERY_SECOND)
    async def stamp(schedule: Schedule) -> None:
        stamps.record(schedule.next_run.timestamp(), "next")

    try:
        yield pgq
    finally:
        await conn.close()


def install(bench: Bench, suffix: str) -> str:
    """A fresh database with pgqueuer's schema, installed by its own command."""
    url = bench.server.database(suffix, fleet_schema=False)
    done = subprocess.run(
        [str(BIN / "pgq"), "install"],
        env=env_for(url, **pg_env(url)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pgq install failed:\n{done.stdout}\n{done.stderr}")
    return url


def asyncpg_kwargs(url: str) -> dict[str, Any]:
    d = conninfo_to_dict(url)
    kwargs = {
        "host": d.get("host"),
        "port": int(str(d["port"])) if d.get("port") else None,
        "user": d.get("user"),
        "password": d.get("password") or None,
        "database": d.get("dbname"),
    }
    return {k: v for k, v in kwargs.items() if v is not None}


async def _enqueue(url: str, n: int) -> None:
    conn = await asyncpg.connect(**asyncpg_kwargs(url))
    try:
        async with conn.transaction():
            await Queries(AsyncpgDriver(conn)).enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
    finally:
        await conn.close()


class PgqueuerDrain:
    """Two `pgq run` processes with --batch-size B."""

    processes = 2
    backlog_cap: int | None = None

    def __init__(self, url: str, batch: int) -> None:
        self.url = url
        self.batch = batch
        self.key = f"pgqueuer.b{batch}"
        self.label = f"pgqueuer {_version()}, {self.processes} workers, --batch-size {batch}"

    def trial(self, bench: Bench, n: int) -> Trial:
        with connect(self.url, "fleet-bench") as conn:
            conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
            conn.execute("VACUUM ANALYZE pgqueuer")
            conn.execute("VACUUM ANALYZE pgqueuer_log")
            checkpoint(conn)

        def start() -> list[Proc]:
            argv = [
                str(BIN / "pgq"),
                "run",
                "loadtest.bench.peer_pgqueuer:drain_app",
                "--batch-size",
                str(self.batch),
            ]
            env = env_for(self.url, **pg_env(self.url))
            return [
                bench.procs.start(argv, env, bench.log(f"drain-{self.key}-{i}"))
                for i in range(self.processes)
            ]

        def load() -> None:
            asyncio.run(_enqueue(self.url, n))

        return drain_trial(
            bench,
            self.url,
            start=start,
            ready=lambda: bench.server.sessions(self.url) >= self.processes,
            load=load,
            tables=("pgqueuer",),
            still_open="SELECT EXISTS (SELECT 1 FROM pgqueuer) AS open",
            measure="SELECT count(*) FILTER (WHERE status = 'successful') AS n, "
            "extract(epoch FROM max(created) FILTER (WHERE status = 'successful') "
            "                  - min(created) FILTER (WHERE status = 'picked'))::float8 AS s "
            "FROM pgqueuer_log",
            n=n,
        )


def _version() -> str:
    from importlib.metadata import version

    return version("pgqueuer")


def drain_contenders(bench: Bench) -> list[PgqueuerDrain]:
    url = install(bench, "pgqueuer")
    return [PgqueuerDrain(url, b) for b in (10, 100)]


def lag(bench: Bench, seconds: float) -> list[float]:
    """Slot-to-handler-start lags (s) of an every-second schedule served by one `pgq run` process."""
    import time

    url = install(bench, "pgqueuer_lag")
    path = bench.log_dir / "lag-pgqueuer.stamps"
    path.unlink(missing_ok=True)
    argv = [str(BIN / "pgq"), "run", "loadtest.bench.peer_pgqueuer:lag_app"]
    p = bench.procs.start(
        argv, env_for(url, **pg_env(url), BENCH_STAMPS=str(path)), bench.log("lag-pgqueuer")
    )
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            bench.procs.check([p])
            time.sleep(0.5)
    finally:
        bench.procs.stop([p])
    rows = stamps.read(path)
    # A firing's slot is the next_run handed to the previous firing.
    return [start - prev_next for (prev_next, _, _), (_, start, _) in zip(rows, rows[1:], strict=False)]
