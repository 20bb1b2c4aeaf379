"""What the roles' row rules cost the worker's hot path: PostgreSQL CPU and wall time per run of the
worker's round (finish + claim, with the attempt rows) over a drain of no-op runs, run as the
schema's owner and as a login role granted fleet_worker, each with the rules (fleet/roles.sql) and
without them (the rule triggers dropped, the attempt policy opened), in one session per trial, the
modes interleaved. CPU is read from /proc/<backend pid>/schedstat (the server must run on this
machine); creating the login role needs CREATEROLE.

    .venv/bin/python -m loadtest.bench.rules_cost [--database-url URL] [--runs N] [--repeat R]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from importlib import resources

from psycopg.conninfo import make_conninfo

from fleet.store.db import connect
from fleet.store.migrate import migrate
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.report import median
from loadtest.bench.rounds import backend_cpu_ns, fleet_round
from loadtest.bench.server import checkpoint, cpu_tool_parser, local_database

MODES = ("owner, rules", "owner, no rules", "worker, rules", "worker, no rules")
BATCH = 100
# The rules removed: what `worker, no rules` and `owner, no rules` run without.
NO_RULES = """
DROP TRIGGER IF EXISTS job_runs_worker_rules ON fleet.job_runs;
DROP POLICY IF EXISTS fleet_worker_attempt ON fleet.job_attempts;
CREATE POLICY fleet_worker_attempt ON fleet.job_attempts FOR INSERT TO fleet_worker WITH CHECK (true);
"""


def set_rules(url: str, on: bool) -> None:
    with connect(url, "fleet-bench rules") as conn:
        if on:
            conn.execute(resources.files("fleet").joinpath("roles.sql").read_text(encoding="utf-8").encode())
        else:
            conn.execute(NO_RULES.encode())


def trial(owner_url: str, run_url: str, runs: int) -> tuple[float, float]:
    """(PostgreSQL CPU µs, wall µs) per run draining `runs` vacuumed, checkpointed runs through the
    worker's round on `run_url`, leaving out the first rounds (statements not yet prepared)."""
    with connect(owner_url, "fleet-bench rules") as conn:
        reset_runs(conn)
        insert_runs(conn, runs)
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        checkpoint(conn)
    one = fleet_round()
    with connect(run_url, "fleet-bench rules", prepare=True) as conn:
        conn.autocommit = True
        pid = conn.info.backend_pid
        for _ in range(5):  # warm-up: prepared statements, generic plans
            one(conn, BATCH)
        start, wall, done = backend_cpu_ns(pid), time.perf_counter(), 0
        while True:
            n = one(conn, BATCH)
            done += n
            if n < BATCH:
                break
        cpu_ns, wall_s = backend_cpu_ns(pid) - start, time.perf_counter() - wall
    if done < runs // 2:
        raise RuntimeError(f"rules_cost: only {done} of {runs} runs finished")
    return cpu_ns / done / 1000, wall_s / done * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    p = cpu_tool_parser("rules_cost", __doc__)
    p.add_argument("--runs", type=int, default=20_000, help="runs drained per trial (20000)")
    p.add_argument("--repeat", type=int, default=3, help="trials per mode, median reported (3)")
    a = p.parse_args(argv)
    role = f"fleet_bench_worker_{os.getpid()}"
    with local_database(a.database_url, "rules", "rules_cost") as url:
        if url is None:
            return 2
        with connect(url, "fleet-bench rules") as conn:
            migrate(conn, roles=True)
            add_schedule(conn)
            conn.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE fleet_worker')
        try:
            urls = {"owner": url, "worker": make_conninfo(url, user=role)}
            got: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
            for _ in range(a.repeat):
                for mode in MODES:  # interleaved, so drift hits every mode alike
                    who, rules = mode.split(", ")
                    set_rules(url, rules == "rules")
                    got[mode].append(trial(url, urls[who], a.runs))
            set_rules(url, True)
        finally:
            with connect(url, "fleet-bench rules") as conn:
                conn.execute(f'DROP OWNED BY "{role}"')
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')
        print(f"The worker's round (finish + claim, rounds of {BATCH}), {a.runs:,} runs per trial, per run:")
        print(f"{'':18}{'PostgreSQL CPU':>16}{'wall':>12}   trials (CPU µs)")
        for mode in MODES:
            cpu = median([c for c, _ in got[mode]])
            wall = median([w for _, w in got[mode]])
            trials = " / ".join(f"{c:.1f}" for c, _ in got[mode])
            print(f"{mode:18}{cpu:13.1f} µs{wall:9.1f} µs   ({trials})")
        for who in ("owner", "worker"):
            with_rules = median([c for c, _ in got[f"{who}, rules"]])
            bare = median([c for c, _ in got[f"{who}, no rules"]])
            print(f"the rules cost the {who}: {with_rules - bare:+.1f} µs of PostgreSQL CPU per run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
