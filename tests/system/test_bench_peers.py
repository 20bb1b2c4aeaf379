"""The peers the benchmark installs itself, graphile-worker (npm) and DBOS Transact (its own virtual
environment), drain a small backlog at their best settings and run the herd: their processes are
real, started and stopped by pid, and their figures come out positive. No timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench import peers
from loadtest.bench.config import Bench, options
from loadtest.bench.peer_procs import herd_trial
from loadtest.bench.server import Server


@pytest.mark.parametrize(("peer", "key"), [("graphile-worker", "graphile_worker"), ("dbos", "dbos")])
def test_a_peer_drains_a_backlog_and_runs_the_herd_at_its_best_settings(
    server_url: str, tmp_path: Path, peer: str, key: str
) -> None:
    bench = Bench(
        options(("peers",), True, 1, 300, (2,), peers=(peer,)), Server(server_url), tmp_path / "logs"
    )
    try:
        module = peers._module(peer)
        best, defaults = module.drain_contenders(bench)
        assert (best.key, defaults.key) == (f"{key}.best", f"{key}.defaults")
        assert "best: " in best.label and "defaults: " in defaults.label and best.processes == 2
        trial = best.trial(bench, 300)
        assert trial.runs == 300 and trial.rate > 0 and trial.peak_rss_kib > 0 and trial.cpu_s > 0
        assert not bench.procs.started  # the workers were stopped by pid
        herd = module.herds(bench)[0]
        assert herd.key == f"{key}.best"
        # The herd's instant to its last start: at or after the instant, within the wait.
        assert 0 <= herd_trial(bench, herd) < 60
    finally:
        bench.close()
    assert not bench.procs.started
