"""Full-jitter exponential backoff."""

from __future__ import annotations

import random

import pytest

from fleet.timing.backoff import backoff_ceiling, backoff_delay


def test_ceilings_from_the_design() -> None:
    assert [backoff_ceiling(n, 30, 900) for n in range(1, 8)] == [30, 60, 120, 240, 480, 900, 900]


def test_delay_is_uniform_below_the_ceiling() -> None:
    rng = random.Random(7)
    delays = [backoff_delay(3, 1, 4, rng.random) for _ in range(2000)]
    assert all(0 <= d < 4 for d in delays)
    assert 1.7 < sum(delays) / len(delays) < 2.3  # mean of U(0, 4)
    assert backoff_delay(1, 30, 900, lambda: 0.0) == 0.0


def test_huge_failure_counts_do_not_overflow() -> None:
    assert backoff_ceiling(10_000, 30, 900) == 900


def test_failures_count_from_one() -> None:
    with pytest.raises(ValueError):
        backoff_ceiling(0, 1, 2)
