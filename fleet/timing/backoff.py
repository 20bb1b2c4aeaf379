"""Retry delays: exponential backoff with full jitter."""

from __future__ import annotations

from collections.abc import Callable


def backoff_ceiling(failure: int, base_s: float, cap_s: float) -> float:
    """The longest wait after the `failure`-th failed attempt: min(cap, base * 2^(failure-1))."""
    if failure < 1:
        raise ValueError("failure counts from 1")
    # 2**(failure-1) overflows floats long after it passes any cap; clamp the exponent first.
    return min(cap_s, base_s * 2.0 ** min(failure - 1, 1000))


def backoff_delay(failure: int, base_s: float, cap_s: float, rand: Callable[[], float]) -> float:
    """Full jitter: a uniform wait in [0, ceiling); `rand` returns a float in [0, 1)."""
    return rand() * backoff_ceiling(failure, base_s, cap_s)
