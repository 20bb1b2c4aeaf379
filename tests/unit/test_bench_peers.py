"""The benchmark's peers, their pure parts: which peers a run measures (--peers, --strict), a peer
left out or failing the run when it cannot be installed, the URI their drivers read, the handlers'
window the worker processes write, the herd's slot-to-last-start, and fleet beside each peer in
the ratios and on the figures page."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadtest.bench import docs as bench_docs
from loadtest.bench import peer_install, peers
from loadtest.bench.__main__ import parse
from loadtest.bench.config import PEERS, Bench, options
from loadtest.bench.lag import last_starts
from loadtest.bench.peer_install import PeerUnavailable
from loadtest.bench.peer_procs import ProcessFiles, this_slot, uri
from loadtest.bench.report import Report
from loadtest.bench.server import Server
from loadtest.bench.targets import add_ratios


def test_the_peers_section_measures_every_peer_unless_told_which() -> None:
    opts, _ = parse(["--only", "drain"])
    assert opts.peers == PEERS == ("pgqueuer", "procrastinate", "graphile-worker", "dbos")
    assert opts.strict is False
    opts, _ = parse(["--only", "peers", "--peers", "graphile-worker, dbos", "--strict"])
    assert opts.peers == ("graphile-worker", "dbos") and opts.strict is True


def test_a_peer_whose_python_packages_are_missing_is_left_out_or_refused_under_strict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import loadtest.bench.__main__ as main

    monkeypatch.setattr(main, "missing_packages", lambda names: [n for n in names if n == "pgqueuer"])
    opts, _ = parse(["--only", "drain,peers", "--peers", "pgqueuer,dbos"])
    assert opts.peers == ("dbos",) and "peers" in opts.sections
    assert "peers: pgqueuer not installed (pip install -e '.[bench]'): left out" in capsys.readouterr().out
    opts, _ = parse(["--only", "drain,peers", "--peers", "pgqueuer"])
    assert opts.sections == ("drain",)  # no peer left to measure
    with pytest.raises(SystemExit) as e:
        parse(["--only", "peers", "--peers", "pgqueuer", "--strict"])
    assert e.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("error: peers: pgqueuer not installed (pip install -e '.[bench]'); --strict")
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--peers", "graphile-worker,sidekiq"], "--peers: unknown peer(s): sidekiq"),
        (["--peers", " , "], "--peers: must name at least one peer"),
    ],
)
def test_bad_peers_are_refused_in_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: {message}")


def test_without_node_graphile_worker_says_so_and_is_left_out_or_fails_under_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no node, no npm
    monkeypatch.setenv(peer_install.DIR_ENV, str(tmp_path / "peers"))
    with pytest.raises(PeerUnavailable, match="Node.js and npm are not installed"):
        peer_install.npm_package("graphile-worker", peer_install.GRAPHILE_WORKER)
    assert not (tmp_path / "peers").exists()  # nothing half-installed
    server = Server("postgresql://unused")  # never reached: the peer fails before any database
    report = Report({})
    lenient = Bench(options(("peers",), True, 1, 100, (2,), peers=("graphile-worker",)), server, tmp_path)
    assert peers.drain_contenders(lenient, report) == []
    assert report.notes[0].startswith("peers: graphile-worker left out: Node.js and npm are not installed")
    assert "graphile-worker left out" in capsys.readouterr().out
    strict = Bench(
        options(("peers",), True, 1, 100, (2,), peers=("graphile-worker",), strict=True), server, tmp_path
    )
    with pytest.raises(RuntimeError, match=r"graphile-worker: Node.js and npm .* \(--strict\)"):
        peers.drain_contenders(strict, Report({}))


def test_the_peers_folder_is_outside_the_repository_unless_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(peer_install.DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert peer_install.peers_dir() == tmp_path / "cache" / "fleet-bench" / "peers"
    monkeypatch.setenv(peer_install.DIR_ENV, str(tmp_path / "elsewhere"))
    assert peer_install.peers_dir() == tmp_path / "elsewhere"


def test_the_peers_drivers_get_the_database_as_a_uri() -> None:
    assert uri("host=127.0.0.1 port=5432 user=postgres dbname=fleet_bench_1_dbos") == (
        "postgresql://postgres@127.0.0.1:5432/fleet_bench_1_dbos"
    )
    assert uri("postgresql://u:p%40ss@db.local:6000/x") == "postgresql://u:p%40ss@db.local:6000/x"
    assert uri("host=/run/pg port=5433 dbname=b") == "postgresql://:5433/b?host=%2Frun%2Fpg"


def test_the_window_spans_every_process_first_start_to_last_end(tmp_path: Path) -> None:
    bench = Bench(options(("peers",), True, 1, 100, (2,)), Server("postgresql://unused"), tmp_path)
    files = ProcessFiles(bench, "drain-x", 3)
    assert not files.all_ready()
    for p in files.ready:
        p.write_text("1\n")
    assert files.all_ready()
    files.window[0].write_text("600 100.5 102.0\n")
    files.window[1].write_text("400 100.0 101.5\n")
    files.window[2].write_text("0 0.000000 0.000000\n")  # a process that ran nothing
    assert files.measure() == (1000, 2.0)
    files.window[2].unlink()
    with pytest.raises(RuntimeError, match="drain-x-2.window: the worker wrote no window"):
        files.measure()
    # A new start of the same name begins with none of the old files.
    again = ProcessFiles(bench, "drain-x", 3)
    assert not any(p.exists() for p in (*again.ready, *again.window))
    assert again.env(1)["BENCH_WINDOW"].endswith("drain-x-1.window")


def test_a_burst_is_measured_to_its_last_start() -> None:
    kept = [(10.0, 10.02), (10.0, 10.3), (20.0, 20.05), (10.0, 10.1), (20.0, 20.01)]
    assert last_starts(kept) == pytest.approx([0.3, 0.05])
    assert last_starts([]) == []


def peer_report() -> Report:
    r = Report(
        {"quick": False, "sections": ["drain", "lag", "peers"], "started": "2026-12-05T08:00:00+00:00"}
    )
    r.add("drain.fleet.w2", "drain: fleet, 2 workers", 36_000.0, "runs/s")
    r.add("drain.graphile_worker.best", "drain: graphile-worker, best", 45_000.0, "runs/s")
    r.add("drain.graphile_worker.defaults", "drain: graphile-worker, defaults", 1_500.0, "runs/s")
    r.add("drain.dbos.best", "drain: DBOS, best", 1_600.0, "runs/s")
    r.add("drain.dbos.defaults", "drain: DBOS, defaults", 1_800.0, "runs/s")
    r.add("lag.fleet.every_second.p50", "lag: fleet p50", 4.0, "ms")
    r.add("lag.graphile_worker.best.every_minute.p50", "lag: graphile-worker best p50", 20.0, "ms")
    r.add("lag.graphile_worker.defaults.every_minute.p50", "lag: graphile-worker defaults p50", 18.0, "ms")
    r.add("lag.dbos.best.every_second.p50", "lag: DBOS best p50", 50.0, "ms")
    r.add("lag.dbos.defaults.every_second.p50", "lag: DBOS defaults p50", 950.0, "ms")
    r.add("lag.fleet.burst.last_start", "fleet: 1,000 due, last start", 0.1, "s")
    r.add("lag.graphile_worker.best.herd", "graphile-worker best: 1,000 due", 0.4, "s")
    r.add("lag.graphile_worker.defaults.herd", "graphile-worker defaults: 1,000 due", 2.5, "s")
    r.add("lag.dbos.best.herd", "DBOS best: 1,000 due", 5.0, "s")
    return r


def test_fleet_is_put_beside_each_peer_at_the_better_of_its_settings() -> None:
    r = peer_report()
    add_ratios(r)
    ratios = {f.key: f for f in r.figures if f.section == "ratio"}
    graphile = ratios["ratio.fleet_w2_vs_graphile_worker"]
    assert graphile.value == pytest.approx(36_000 / 45_000) and graphile.ok is False
    assert graphile.target == ">= 1.2" and graphile.note == "drain.fleet.w2 / drain.graphile_worker.best"
    dbos = ratios["ratio.fleet_w2_vs_dbos"]
    assert dbos.value == pytest.approx(36_000 / 1_800) and dbos.target == "" and dbos.ok is None
    # Times: the peer's better (lower) figure over fleet's, so that above 1 means fleet is ahead.
    assert ratios["ratio.lag_graphile_worker_vs_fleet"].value == pytest.approx(18.0 / 4.0)
    assert ratios["ratio.lag_dbos_vs_fleet"].value == pytest.approx(50.0 / 4.0)
    assert ratios["ratio.herd_graphile_worker_vs_fleet"].value == pytest.approx(0.4 / 0.1)
    assert ratios["ratio.herd_dbos_vs_fleet"].value == pytest.approx(5.0 / 0.1)


def test_no_peer_ratio_without_the_peer_or_without_fleet() -> None:
    r = Report({})
    r.add("drain.graphile_worker.best", "graphile-worker", 45_000.0, "runs/s")
    r.add("lag.fleet.every_second.p50", "fleet p50", 4.0, "ms")
    add_ratios(r)
    assert not [f for f in r.figures if f.section == "ratio"]


def test_the_figures_page_shows_the_peers_and_fleet_beside_each() -> None:
    r = peer_report()
    add_ratios(r)
    text = bench_docs.render(orjson.loads(r.json()), "bench.json")
    assert "| drain: graphile-worker, best | 45,000 | runs/s |" in text
    assert "| graphile-worker best: 1,000 due | 0.40 | s |" in text
    assert (
        "| drain: fleet (2 workers) / best graphile-worker (2 workers) | 0.80 | x |  | >= 1.2 | **misses** |"
        in text
    )
    assert "| drain: fleet (2 workers) / best DBOS Transact (2 workers) | 20.0 | x |" in text
    assert (
        "| lag p50: best DBOS Transact (a schedule every second) / fleet (every second) | 12.5 | x |" in text
    )
    # The summary of fleet beside each peer, one row per measure, before the sections.
    head, _, rest = text.partition("## Beside the peers")
    assert rest and "## Drain" not in head, text
    table = rest.split("\n## ")[0]
    heading = "| | fleet | graphile-worker | fleet ahead by | DBOS Transact | fleet ahead by |"
    assert heading in table, table
    assert "| drain, 2 workers (runs/s) | 36,000 | 45,000 | 0.80 | 1,800 | 20.0 |" in table
    assert "| lag p50 (ms) | 4.00 | 18.0 | 4.50 | 50.0 | 12.5 |" in table
    assert "| 1,000 due at once, slot to the last start (s) | 0.10 | 0.40 | 4.00 | 5.00 | 50.0 |" in table


def test_a_peer_measured_only_in_the_drain_has_dashes_for_the_rest() -> None:
    r = Report({"sections": ["drain", "peers"]})
    r.add("drain.fleet.w2", "fleet", 36_000.0, "runs/s")
    r.add("drain.pgqueuer.b100", "pgqueuer, batch 100", 18_000.0, "runs/s")
    add_ratios(r)
    table = bench_docs.render(orjson.loads(r.json()), "bench.json").partition("## Beside the peers")[2]
    assert "| | fleet | pgqueuer | fleet ahead by |" in table
    assert "| drain, 2 workers (runs/s) | 36,000 | 18,000 | 2.00 |" in table
    assert "| lag p50 (ms) | - | - | - |" in table
    assert "## Beside the peers" not in bench_docs.render(orjson.loads(Report({}).json()), "x.json")


def test_a_herd_counts_the_stamps_of_its_own_slot_only() -> None:
    # a peer that resumes at start the jobs an earlier trial's stop interrupted (DBOS) stamps them
    # with that trial's slot: they are not this herd's
    rows = [(100.0, 100.2, ""), (100.0004, 100.3, ""), (90.0, 100.1, ""), (100.002, 100.4, "")]
    assert this_slot(rows, 100.0) == rows[:2]
