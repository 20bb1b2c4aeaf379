"""procrastinate beside fleet: `procrastinate worker` processes draining the same backlog
(concurrency 1 and 10), and an every-second periodic task. The apps below are what its command
imports (libpq environment variables name the database)."""

from __future__ import annotations

import subprocess
import time
from importlib.metadata import version

import procrastinate

from fleet.store.db import connect
from loadtest.bench import stamps
from loadtest.bench.config import Bench
from loadtest.bench.procs import BIN, Proc, env_for
from loadtest.bench.server import checkpoint, pg_env
from loadtest.bench.trial import Trial, drain_trial

drain_app = procrastinate.App(connector=procrastinate.PsycopgConnector())
lag_app = procrastinate.App(connector=procrastinate.PsycopgConnector())


@drain_app.task(name="noop")
async def noop() -> None:
    return None


@lag_app.periodic(cron="* * * * * *")
@lag_app.task(name="stamp")
async def stamp(timestamp: int) -> None:
    stamps.record(float(timestamp), "timestamp")


OPEN_JOBS = "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing')) AS open"


def _cli(app: str, *args: str) -> list[str]:
    return [str(BIN / "procrastinate"), "--app", f"loadtest.bench.peer_procrastinate.{app}", *args]


def install(bench: Bench, suffix: str) -> str:
    """A fresh database with procrastinate's schema, applied by its own command."""
    url = bench.server.database(suffix, fleet_schema=False)
    argv = _cli("drain_app", "schema", "--apply")
    env = env_for(url, **pg_env(url))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"procrastinate schema --apply failed:\n{done.stdout}\n{done.stderr}")
    return url


class ProcrastinateDrain:
    """Two `procrastinate worker` processes with --concurrency C."""

    processes = 2
    # About 50x slower than fleet: the full backlog would take minutes per trial. Its rate does not
    # depend on the backlog's size (it fetches one job at a time).
    backlog_cap: int | None = 10_000

    def __init__(self, url: str, concurrency: int) -> None:
        self.url = url
        self.concurrency = concurrency
        self.key = f"procrastinate.c{concurrency}"
        self.label = (
            f"procrastinate {version('procrastinate')}, {self.processes} workers, --concurrency {concurrency}"
        )

    def trial(self, bench: Bench, n: int) -> Trial:
        with connect(self.url, "fleet-bench") as conn:
            conn.execute(
                "TRUNCATE procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs CASCADE"
            )
            conn.execute("VACUUM ANALYZE procrastinate_jobs")
            conn.execute("VACUUM ANALYZE procrastinate_events")
            checkpoint(conn)

        def start() -> list[Proc]:
            argv = _cli("drain_app", "worker", "--concurrency", str(self.concurrency))
            env = env_for(self.url, **pg_env(self.url))
            return [
                bench.procs.start(argv, env, bench.log(f"drain-{self.key}-{i}"))
                for i in range(self.processes)
            ]

        def load() -> None:
            # procrastinate's own batch-defer function (what Task.batch_defer calls), in one statement.
            with connect(self.url, "fleet-bench load") as conn, conn.transaction():
                conn.execute(
                    "SELECT procrastinate_defer_jobs_v1(array_agg(ROW('default', 'noop', 0, NULL, NULL, "
                    "    '{}'::jsonb, NULL)::procrastinate_job_to_defer_v1)) "
                    "FROM generate_series(1, %s)",
                    (n,),
                )

        return drain_trial(
            bench,
            self.url,
            start=start,
            ready=lambda: bench.server.listeners(self.url) >= self.processes,
            load=load,
            tables=("procrastinate_jobs",),
            still_open=OPEN_JOBS,
            measure="SELECT count(*) FILTER (WHERE type = 'succeeded') AS n, "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') "
            "                  - min(at) FILTER (WHERE type = 'started'))::float8 AS s "
            "FROM procrastinate_events",
            n=n,
        )


def drain_contenders(bench: Bench) -> list[ProcrastinateDrain]:
    url = install(bench, "procrastinate")
    return [ProcrastinateDrain(url, c) for c in (1, 10)]


def lag(bench: Bench, seconds: float) -> list[float]:
    """Slot-to-handler-start lags (s) of an every-second periodic task served by one worker process."""
    url = install(bench, "procrastinate_lag")
    path = bench.log_dir / "lag-procrastinate.stamps"
    path.unlink(missing_ok=True)
    env = env_for(url, **pg_env(url), BENCH_STAMPS=str(path))
    p = bench.procs.start(_cli("lag_app", "worker"), env, bench.log("lag-procrastinate"))
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            bench.procs.check([p])
            time.sleep(0.5)
    finally:
        bench.procs.stop([p])
    return [start - slot for slot, start, _ in stamps.read(path)]
