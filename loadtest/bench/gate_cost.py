"""What the overlap gate costs the server: PostgreSQL CPU per run of the worker's round (finish +
claim) over a drain shaped like the herd, many schedules with one due run each, under overlap
`skip` (each run takes and frees its schedule's gate) and under `allow` (no gate), in one session,
read from /proc/<backend pid>/schedstat (so the server must run on this machine).

    .venv/bin/python -m loadtest.bench.gate_cost [--database-url URL] [--schedules N] [--repeat R]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from fleet.admin.apply import apply_specs
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench.herd import herd_toml
from loadtest.bench.report import median
from loadtest.bench.rounds import backend_cpu_ns, fleet_round
from loadtest.bench.server import checkpoint, cpu_tool_parser, local_database

POLICIES = ("skip", "allow")
BATCH = 100
SLOT = datetime(2026, 1, 1, tzinfo=UTC)


def trial(url: str, overlap: str) -> float:
    """PostgreSQL CPU per run (µs) draining one due run of every schedule, all under `overlap`,
    from a vacuumed, checkpointed table."""
    with connect(url, "fleet-bench gate") as conn:
        conn.execute("TRUNCATE fleet.job_attempts, fleet.job_runs")
        conn.execute("UPDATE fleet.schedules SET overlap = %s", (overlap,))
        runs = conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
            "SELECT name, %s, job, overlap, now() FROM fleet.schedules",
            (SLOT,),
        ).rowcount
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        conn.execute("VACUUM ANALYZE fleet.schedules")
        checkpoint(conn)
    one = fleet_round()
    with connect(url, "fleet-bench gate", prepare=True) as conn:
        pid = conn.info.backend_pid
        start, done = backend_cpu_ns(pid), 0
        for _ in range(runs // BATCH + 3):  # a round finishes the previous round's claims
            n = one(conn, BATCH)
            done += n
            if n == 0 and done > 0:  # the last round finished the last runs and claimed none
                break
        if done != runs:
            raise RuntimeError(f"gate_cost: {done} of {runs} runs finished")
        spent = backend_cpu_ns(pid) - start
    return spent / done / 1000


def main(argv: Sequence[str] | None = None) -> int:
    p = cpu_tool_parser("gate_cost", __doc__)
    p.add_argument("--schedules", type=int, default=20_000, help="schedules, one due run each (20000)")
    p.add_argument("--repeat", type=int, default=3, help="trials per policy, median reported (3)")
    a = p.parse_args(argv)
    with local_database(a.database_url, "gate", "gate_cost") as url:
        if url is None:
            return 2
        with connect(url, "fleet-bench gate") as conn:
            apply_specs(conn, load(herd_toml(a.schedules, SLOT)), prune=False)
        got: dict[str, list[float]] = {o: [] for o in POLICIES}
        for _ in range(a.repeat):  # interleaved, so drift hits both alike
            for overlap in POLICIES:
                got[overlap].append(trial(url, overlap))
        print(
            f"PostgreSQL CPU per run (µs), {a.schedules:,} schedules with one due run each, rounds of {BATCH}:"
        )
        for overlap in POLICIES:
            trials = " / ".join(f"{t:.1f}" for t in got[overlap])
            print(f"overlap {overlap:6}{median(got[overlap]):10.1f} µs   ({trials})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
