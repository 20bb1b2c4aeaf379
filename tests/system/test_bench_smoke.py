"""The benchmark runs end to end in its quick form: it prints the table and writes JSON with positive
figures. No timing is asserted: this machine's speed is not the test's business. A section too
long for the suite has its measured step run here on a small scale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.admin.apply import apply_specs
from fleet.store.db import connect
from fleet.timing.schedfile import load
from loadtest.bench.backlog import add_schedule
from loadtest.bench.bouncer import PGBOUNCER, bouncer
from loadtest.bench.bouncer import WORKER_FLAGS as BOUNCER_FLAGS
from loadtest.bench.claimers import SampledDrain
from loadtest.bench.config import Bench, options
from loadtest.bench.million import timed_apply, write_file
from loadtest.bench.server import Server
from loadtest.bench.ticker_cost import materialise
from tests.support import ROOT


def test_quick_bench_prints_the_table_and_writes_json(server_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-m", "loadtest.bench", "--quick", "--only", "limit,drain,lag"]
    argv += ["--database-url", server_url, "--json", str(out), "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "section" in done.stdout and "drain 10,000 no-op runs" in done.stdout, done.stdout
    doc = json.loads(out.read_text())
    figures = {f["key"]: f["value"] for f in doc["figures"]}
    for key in (
        "drain.fleet.w1",
        "drain.fleet.w2",
        "drain.fleet.w4",
        "drain.fleet.peak_rss",
        "drain.fleet.w1.transactions_per_run",
        "lag.fleet.every_second.p50",
        "lag.fleet.burst.p99",
        "limit.finish_claim.b1",
        "limit.finish_claim.b100",
        "ratio.fleet_vs_finish_claim",
        "drain.fleet.w2.busy_us_per_run",
        "limit.finish_claim.b100.busy_us_per_run",
        "ratio.busy_finish_claim_vs_fleet",
    ):
        assert figures.get(key) is not None and figures[key] > 0, (key, figures.get(key))
    # The batched limit ran between the drains, once per client count: the figure is the best of
    # the client counts' medians.
    (limit,) = [f for f in doc["figures"] if f["key"] == "limit.finish_claim.b100"]
    assert len(limit["trials"]) == 3 and limit["value"] == max(limit["trials"]), limit
    assert doc["meta"]["quick"] is True


def cpu_tool(server_url: str, module: str, *args: str) -> str:
    """What `python -m loadtest.bench.MODULE ARGS` printed against the server, once it exited 0."""
    argv = [sys.executable, "-m", f"loadtest.bench.{module}", *args, "--database-url", server_url]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_rounds_prints_the_cost_of_both_rounds(server_url: str) -> None:
    out = cpu_tool(server_url, "rounds", "--runs", "2000", "--repeat", "1")
    for name in ("fleet round", "pgbench statements"):
        (line,) = [ln for ln in out.splitlines() if ln.startswith(name)] or [out]
        cells = [float(c) for c in line[len(name) :].split() if c != "µs"]
        assert len(cells) == 5 and all(c > 0 for c in cells[:3]), (name, out)


def test_gate_cost_prints_the_cost_per_run_of_both_policies(server_url: str) -> None:
    out = cpu_tool(server_url, "gate_cost", "--schedules", "300", "--repeat", "1")
    for overlap in ("skip", "allow"):
        (line,) = [ln for ln in out.splitlines() if ln.startswith(f"overlap {overlap}")] or [out]
        assert float(line.split()[2]) > 0, out


def test_rules_cost_prints_the_cost_per_run_as_the_owner_and_the_worker_role(server_url: str) -> None:
    out = cpu_tool(server_url, "rules_cost", "--runs", "1000", "--repeat", "1")
    for mode in ("owner, rules", "owner, no rules", "worker, rules", "worker, no rules"):
        (line,) = [ln for ln in out.splitlines() if ln.startswith(mode)] or [out]
        assert float(line[len(mode) :].split()[0]) > 0, out
    assert "the rules cost the worker:" in out, out


def test_ticker_materialisation_creates_one_slot_per_due_schedule(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """The ticker section's measured step on a few schedules (the full section samples a ticker's CPU
    over whole minutes, too long for the suite)."""
    text = "".join(f'[[schedule]]\nname = "m{i}"\nevery = "1m"\njob = "bench.noop"\n' for i in range(50))
    apply_specs(conn, load(text), prune=False)
    created, seconds = materialise(db_url, margin_s=5.0)
    assert created == 50 and seconds > 0
    rows = conn.execute("SELECT schedule_name, count(*) AS n FROM fleet.job_runs GROUP BY 1").fetchall()
    assert len(rows) == 50 and {r["n"] for r in rows} == {1}, rows


def test_the_async_section_reports_a_thousand_async_handlers(server_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-m", "loadtest.bench", "--quick", "--only", "async"]
    argv += ["--database-url", server_url, "--json", str(out), "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = {f["key"]: f for f in json.loads(out.read_text())["figures"]}
    span = figures["async.first_claim_to_last_finish"]
    # The handlers sleep 1 s each: a span of at least that proves they ran, one trial in --quick.
    assert span["value"] >= 1.0 and len(span["trials"]) == 1 and span["target"] == "<= 2", span
    assert figures["async.worker_cpu"]["value"] > 0 and figures["async.peak_rss"]["value"] > 0


def test_the_jobsets_and_cost_sections_report_their_figures(server_url: str, tmp_path: Path) -> None:
    """The worker beside other jobs' runs, and where a run's CPU goes: every figure is there."""
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-m", "loadtest.bench", "--quick", "--only", "jobsets,cost"]
    argv += ["--database-url", server_url, "--json", str(out), "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = {f["key"]: f for f in json.loads(out.read_text())["figures"]}
    for key in (
        "jobsets.single",
        "jobsets.mixed",
        "jobsets.beside",
        "jobsets.mixed.ratio",
        "jobsets.beside.ratio",
    ):
        assert (figures[key]["value"] or 0) > 0, figures[key]
    assert figures["jobsets.beside.ratio"]["target"] == ">= 0.9", figures["jobsets.beside.ratio"]
    for part in ("statements", "logs", "loop", "dispatch", "total"):
        assert (figures[f"cost.worker.{part}"]["value"] or 0) > 0, part
    worker = figures["cost.worker.total"]["value"]
    parts = sum(figures[f"cost.worker.{p}"]["value"] for p in ("statements", "logs", "loop", "dispatch"))
    assert abs(parts - worker) < 0.01 * worker + 0.01, (parts, worker)  # the parts make the whole
    for part in ("claim", "finish", "attempt_row"):  # the server runs on this machine in the suite
        assert (figures[f"cost.server.{part}"]["value"] or 0) > 0, part
    assert figures["cost.server.notify"]["value"] == 0  # a drain's finishes wake nobody


def test_the_herd_sustained_and_claimers_sections_report_their_figures(
    server_url: str, tmp_path: Path
) -> None:
    """Small sizes: 300 schedules in one second, 120 every minute for one minute, 1 and 2 claimers."""
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-m", "loadtest.bench", "--only", "herd,sustained,claimers", "--repeat", "1"]
    argv += ["--herd", "300", "--sustained", "120", "--sustained-minutes", "1", "--claimers", "1,2"]
    argv += ["--backlog", "2000", "--database-url", server_url, "--json", str(out)]
    argv += ["--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = {f["key"]: f for f in json.loads(out.read_text())["figures"]}
    assert (
        figures["herd.slot_to_last_start"]["value"] > 0
        and figures["herd.slot_to_last_start"]["target"] == "< 5"
    )
    assert figures["herd.lag.p99"]["value"] >= figures["herd.lag.p50"]["value"] > 0
    assert "herd.slot_to_last_created" in figures and figures["herd.created_ahead"]["value"] >= 0
    # Every slot of the minute had its run: the schedules' slots and the window line up.
    assert figures["sustained.missed"]["value"] == 0 and figures["sustained.missed"]["ok"] is True
    assert figures["sustained.not_started"]["value"] == 0
    assert figures["sustained.lag.p50"]["value"] > 0 and figures["sustained.ticker_cpu"]["value"] > 0
    assert figures["claimers.direct.w1"]["value"] > 0 and figures["claimers.direct.w2"]["value"] > 0
    assert figures["claimers.connections_per_worker"]["value"] == 3
    assert figures["ratio.claimers_most_vs_best"]["target"] == ">= 0.8"


@pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer (Debian package pgbouncer) not installed")
def test_a_claimers_drain_runs_through_pgbouncer(server_url: str, tmp_path: Path) -> None:
    """The path a fleet past max_connections takes: workers through PgBouncer in transaction mode,
    without LISTEN wake-ups, ready once registered; the sampled sessions are PgBouncer's."""
    server = Server(server_url)
    bench = Bench(options(("claimers",), True, 1, 500, (1,)), server, tmp_path / "logs")
    try:
        url = server.database("pgbouncer")
        with psycopg.connect(url, autocommit=True) as conn:
            add_schedule(conn)
        with bouncer(bench, url, 30, pool_size=3) as through:
            drain = SampledDrain(
                server.url, url, 2, key="pgbouncer.w2", worker_url=through, flags=BOUNCER_FLAGS
            )
            trial = drain.trial(bench, 500)
        assert trial.runs == 500 and trial.rate > 0
        (activity,) = drain.activity
        assert 1 <= activity.peak <= 3  # the pool's server connections, never the clients'
    finally:
        bench.close()
    assert not bench.procs.started


def test_the_million_sections_apply_is_timed_with_its_peak_rss(server_url: str, tmp_path: Path) -> None:
    """The million section's apply step on a small file (the full section applies a million
    schedules and runs a ticker for ten minutes)."""
    bench = Bench(options(("million",), True, None, None, (1,)), Server(server_url), tmp_path / "logs")
    try:
        url = bench.server.database("million")
        path = tmp_path / "schedules.toml"
        write_file(path, 500)
        wall, peak_mib, cpu_s = timed_apply(bench, url, path, "apply")
        assert wall > 0 and 10 < peak_mib < 2048 and cpu_s > 0, (wall, peak_mib, cpu_s)
        assert not bench.procs.started  # reaped: nothing left to stop
        with connect(url, "test") as conn:
            row = conn.execute(
                "SELECT count(*) AS n, count(DISTINCT cron) AS crons FROM fleet.schedules"
            ).fetchone()
        assert row == {"n": 500, "crons": 500}
        timed_apply(bench, url, path, "again")
        assert "created 0, updated 0, replanned 0, unchanged 500" in bench.log("again").read_text()
    finally:
        bench.close()
