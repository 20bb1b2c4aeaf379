"""The order in which a worker's claims walk its jobs."""

from __future__ import annotations

from fleet.worker.loop import turned


def test_a_worker_turns_its_jobs_round_from_claim_to_claim() -> None:
    assert [turned(["a", "b", "c"], t) for t in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert turned(["a"], 5) == ["a"]
    assert turned([], 3) == []
