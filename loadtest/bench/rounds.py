"""Where a drain's database time goes: PostgreSQL CPU per run of fleet's round (planner settings,
finish, claim) against the pgbench finish + claim script's statements, in one session, at several
batch sizes, read from /proc/<backend pid>/schedstat (so the server must run on this machine).

A round's cost is a fixed part (its statements' start, the commit) plus a part per run; the fit of
cost per run = fixed / batch + per_run over the batch sizes separates the two.

    .venv/bin/python -m loadtest.bench.rounds [--database-url URL] [--runs N] [--repeat R]
"""

from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from fleet.store.db import connect
from fleet.worker.attempt import Attempt, Outcome
from fleet.worker.finish import DONE
from fleet.worker.loop import run_round
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.report import median
from loadtest.bench.server import checkpoint, cpu_tool_parser, local_database

BATCHES = (25, 50, 100)
SCRIPT = Path(__file__).resolve().parent.parent / "pgbench_finish_claim.sql"


def backend_cpu_ns(pid: int) -> int:
    """CPU time of a server process so far (first field of schedstat, in ns)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def pgbench_statements() -> list[str]:
    """The pgbench script's statements, its variables as psycopg placeholders, BEGIN/COMMIT left out."""
    text = "\n".join(ln for ln in SCRIPT.read_text().splitlines() if not ln.lstrip().startswith("--"))
    stmts = [s.strip() for s in text.split(";") if s.strip() and s.strip() not in ("BEGIN", "COMMIT")]
    return [re.sub(r":(batch|client_id)\b", r"%(\1)s", s) for s in stmts]


Round = Callable[[psycopg.Connection[Any], int], int]


def fleet_round() -> Round:
    """The worker's own round (`worker.loop.run_round`): finish the previous batch, claim the next."""
    batch: list[tuple[Attempt, Outcome]] = []

    def one(conn: psycopg.Connection[Any], size: int) -> int:
        nonlocal batch
        done, _, attempts, _ = run_round(
            conn, batch, worker_id="rounds", jobs=["bench.noop"], limit=size, lease_s=60
        )
        batch = [(a, DONE) for a in attempts]
        return len(done)

    return one


def pgbench_round() -> Round:
    """The pgbench script's finish (rows this session holds) and claim, in one transaction."""
    finish, claim = pgbench_statements()
    held = 0

    def one(conn: psycopg.Connection[Any], size: int) -> int:
        nonlocal held
        params = {"batch": size, "client_id": 1}
        with conn.transaction():
            conn.execute(finish, params)
            claimed = conn.cursor(row_factory=tuple_row).execute(claim, params).rowcount
        done, held = held, claimed
        return done

    return one


def trial(url: str, make: Callable[[], Round], size: int, runs: int) -> float:
    """PostgreSQL CPU per finished run (µs) over a drain of `runs` vacuumed, checkpointed runs,
    leaving out the first rounds (statements not yet prepared)."""
    with connect(url, "fleet-bench rounds") as conn:
        reset_runs(conn)
        insert_runs(conn, runs)
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        checkpoint(conn)
    one = make()
    with connect(url, "fleet-bench rounds", prepare=True) as conn:
        conn.autocommit = True
        pid = conn.info.backend_pid
        for _ in range(8):  # warm-up: prepared statements, generic plans
            one(conn, size)
        start, done = backend_cpu_ns(pid), 0
        while True:
            n = one(conn, size)
            done += n
            if n < size:
                break
        spent = backend_cpu_ns(pid) - start
    return spent / max(done, 1) / 1000


def fit(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of cost = fixed / batch + per_run: (fixed µs per round, µs per run)."""
    return statistics.linear_regression([1 / b for b, _ in points], [c for _, c in points])


def main(argv: Sequence[str] | None = None) -> int:
    p = cpu_tool_parser("rounds", __doc__)
    p.add_argument("--runs", type=int, default=40_000, help="runs drained per trial (40000)")
    p.add_argument("--repeat", type=int, default=3, help="trials per figure, median reported (3)")
    a = p.parse_args(argv)
    with local_database(a.database_url, "rounds", "rounds") as url:
        if url is None:
            return 2
        with connect(url, "fleet-bench rounds") as conn:
            add_schedule(conn)
        contenders = {"fleet round": fleet_round, "pgbench statements": pgbench_round}
        got: dict[tuple[str, int], list[float]] = {}
        for _ in range(a.repeat):  # interleaved, so drift hits all alike
            for size in BATCHES:
                for name, make in contenders.items():
                    got.setdefault((name, size), []).append(trial(url, make, size, a.runs))
        print(f"PostgreSQL CPU per run (µs), one session, median of {a.repeat}:")
        print(
            f"{'':20}" + "".join(f"{f'batch {b}':>12}" for b in BATCHES) + f"{'per round':>12}{'per run':>10}"
        )
        for name in contenders:
            points = [(b, median(got[(name, b)])) for b in BATCHES]
            fixed, per_run = fit(points)
            cells = "".join(f"{c:12.1f}" for _, c in points)
            print(f"{name:20}{cells}{fixed:10.0f} µs{per_run:8.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
