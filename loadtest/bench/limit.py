"""PostgreSQL's own limit on this machine: pgbench running the claim and finish statements of a job
queue, and a single-row update, on fleet's job_runs table, with 2, 4 and 8 clients."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from fleet.store.db import connect
from loadtest.bench.backlog import add_schedule, insert_runs, reset_runs
from loadtest.bench.config import BATCH, Bench
from loadtest.bench.report import Report, median
from loadtest.bench.server import busy_cpu_s, checkpoint
from loadtest.bench.trial import Trial

HERE = Path(__file__).resolve().parent.parent
UPDATE_ROWS = 10_000


@dataclass(frozen=True)
class Script:
    key: str
    file: str
    batch: int  # rows per claim; 0 for the update script
    label: str


SCRIPTS = (
    Script("claim_finish.b1", "pgbench_claim_finish.sql", 1, "claim + finish, 1 row/claim, 2 commits"),
    Script(
        "claim_finish.b100",
        "pgbench_claim_finish.sql",
        BATCH,
        f"claim + finish, {BATCH} rows/claim, 2 commits",
    ),
    Script("finish_claim.b1", "pgbench_finish_claim.sql", 1, "finish + claim, 1 row/claim, 1 commit"),
    Script(
        "finish_claim.b100",
        "pgbench_finish_claim.sql",
        BATCH,
        f"finish + claim, {BATCH} rows/claim, 1 commit",
    ),
    Script("update", "pgbench_update.sql", 0, "single-row update by key"),
)


def pgbench_binary() -> str:
    """The pgbench shipped with the embedded server (same version), else the one on PATH."""
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("pgbench")
    if not found:
        raise RuntimeError("pgbench not found (install PostgreSQL's client tools)")
    return found


def run_pgbench(url: str, script: Script, clients: int, transactions: int) -> float:
    """tps (script executions per second, without connection time) of one pgbench run."""
    argv = [
        pgbench_binary(), "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
        "-t", str(transactions), "-f", str(HERE / script.file),
        "-D", f"batch={max(script.batch, 1)}", "-D", f"rows={UPDATE_ROWS}", url,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    processed = re.search(r"number of transactions actually processed: (\d+)/(\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if done.returncode != 0 or not processed or not tps or processed.group(1) != processed.group(2):
        raise RuntimeError(f"pgbench failed ({' '.join(argv[:-1])}):\n{out[-2000:]}")
    if failed and int(failed.group(1)):
        raise RuntimeError(f"pgbench: {failed.group(1)} failed transactions:\n{out[-2000:]}")
    return float(tps.group(1))


class Measured(NamedTuple):
    rate: float  # jobs/s for a claim script, tps for the update script
    busy_s: float  # this machine's busy CPU time (all cores) while pgbench ran
    jobs: int  # jobs (claim scripts) or transactions (update script) pgbench ran


def measure(bench: Bench, url: str, script: Script, clients: int) -> Measured:
    """One pgbench run of `script` on a freshly loaded, vacuumed and checkpointed job_runs: jobs/s for a
    claim script (checked against the rows it left done), tps for the update script."""
    quick = bench.opts.quick
    if script.batch:
        jobs = bench.opts.backlog if script.batch > 1 else (5_000 if quick else 20_000)
        per_run = max(1, jobs // (clients * script.batch))
        rows = (per_run + 1) * clients * script.batch
    else:
        per_run = (10_000 if quick else 40_000) // clients
        rows = UPDATE_ROWS
    with connect(url, "fleet-bench") as conn:
        reset_runs(conn)
        insert_runs(conn, rows)
        conn.execute("VACUUM ANALYZE fleet.job_runs")
        checkpoint(conn)
    busy = busy_cpu_s()
    tps = run_pgbench(url, script, clients, per_run)
    busy = busy_cpu_s() - busy
    if not script.batch:
        return Measured(tps, busy, per_run * clients)
    with connect(url, "fleet-bench") as conn:
        row = conn.execute("SELECT count(*) AS n FROM fleet.job_runs WHERE status = 'done'").fetchone()
    expected = per_run * clients * script.batch
    floor = expected - clients * script.batch  # finish+claim leaves its last claim running
    if not row or not floor <= row["n"] <= expected:
        raise RuntimeError(f"pgbench {script.key}: {row} rows done, expected about {expected}")
    return Measured(tps * script.batch, busy, expected)


def limit_database(bench: Bench) -> str:
    url = bench.server.database("limit")
    with connect(url, "fleet-bench") as conn:
        add_schedule(conn)
    return url


def contender_key(script: Script, clients: int) -> str:
    return f"limit.{script.key}.c{clients}"


class LimitDrain:
    """A batched pgbench script with one client count as a drain contender, so that the limit is
    measured between fleet's drain trials, under the same drift: one trial is one pgbench run."""

    backlog_cap: int | None = None
    processes = 0

    def __init__(self, url: str, script: Script, clients: int) -> None:
        self.url = url
        self.script = script
        self.clients = clients
        self.key = contender_key(script, clients)
        self.label = f"pgbench {script.label}, {clients} clients"

    def trial(self, bench: Bench, n: int) -> Trial:
        m = measure(bench, self.url, self.script, self.clients)
        # Scaled to the `n` runs the drains report: pgbench's busy time is for the jobs it ran.
        busy = m.busy_s * n / m.jobs
        return Trial(runs=n, seconds=n / m.rate, transactions=0, peak_rss_kib=0, cpu_s=0.0, busy_s=busy)


def interleaved(bench: Bench) -> list[LimitDrain]:
    """The batched scripts, one contender per client count, when the drain measures them beside
    fleet's trials."""
    if not (bench.selected("limit") and bench.selected("drain")):
        return []
    url = limit_database(bench)
    return [LimitDrain(url, s, c) for s in SCRIPTS if s.batch > 1 for c in bench.opts.clients]


def report_interleaved(
    report: Report,
    trials: dict[str, list[float]],
    clients: Sequence[int],
    busy: dict[str, list[float]] | None = None,
) -> None:
    """The limit of each batched script measured between the drains, estimated as fleet's drain
    figure is: the median of the trials for each client count (worker count, for fleet), then the
    best of them. With `busy` (this machine's busy CPU per job in each trial), the cheapest client
    count's median too."""
    for script in SCRIPTS:
        per_client = [median(r) for c in clients if (r := trials.get(contender_key(script, c)))]
        if not per_client:
            continue
        report.add(
            f"limit.{script.key}",
            f"pgbench {script.label} (best of the {'/'.join(map(str, clients))} clients' medians, "
            "between the drains)",
            max(per_client),
            "jobs/s",
            trials=per_client,
            note="trials: the median of each client count",
        )
        cpu = [median(r) for c in clients if busy and (r := busy.get(contender_key(script, c)))]
        if cpu:
            report.add(
                f"limit.{script.key}.busy_us_per_run",
                f"this machine's busy CPU per job: pgbench {script.label} (cheapest client count)",
                min(cpu),
                "us/run",
                trials=cpu,
            )


def run(bench: Bench, report: Report) -> None:
    url = limit_database(bench)
    later = bench.selected("drain")  # the batched scripts then run interleaved with the drain
    for script in SCRIPTS:
        if later and script.batch > 1:
            continue
        per_client = [measure(bench, url, script, clients).rate for clients in bench.opts.clients]
        unit = "jobs/s" if script.batch else "tps"
        report.add(
            f"limit.{script.key}",
            f"pgbench {script.label} ({'/'.join(map(str, bench.opts.clients))} clients)",
            max(per_client),
            unit,
            trials=per_client,
            note="best over the client counts; trials are per client count",
        )
    report.note(
        "limit: pgbench on fleet's own job_runs table (same indexes), one run per client count, -M prepared; "
        "value = best of the client counts, trials = each client count. When the drain is measured too, "
        f"the {BATCH}-rows-per-claim scripts run between its trials instead, one run per client count in "
        "each repetition; value = the best of the client counts' medians over the repetitions, as fleet's "
        "best drain figure is the best of the worker counts' medians. The scripts only claim "
        "and finish: no history row, no trace ids, no schedule join, which fleet's statements also do"
    )
