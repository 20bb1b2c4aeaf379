"""The load test's job `loadtest.work`: it records its start, works for a drawn duration, may fail,
then applies its one side effect, a ledger row written under the slot's idempotency key.

Durations and failures are drawn from a hash of the seed, the slot's key and the attempt, so a run is
reproducible and the audit can recompute which slots had to end dead. The job's settings come from
the schedule's args; its database is the worker's (FLEET_DATABASE_URL).
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

import fleet
from fleet import JobContext
from fleet.store.pool import make_pool
from loadtest.queries import q

JOB = "loadtest.work"
POOL_TIMEOUT_S = 5.0
DISTRIBUTIONS = ("fixed", "uniform", "exp", "lognormal")


@dataclass(frozen=True)
class WorkArgs:
    """The job's settings, carried in the schedule's args."""

    seed: int = 1
    transient: float = 0.0  # probability that an attempt fails and is retried
    permanent: float = 0.0  # probability that a slot fails for good (fleet.Permanent)
    duration: str = "exp:0.3"  # distribution of the work's duration, see draw_duration
    duration_max: float = 3.0
    idempotent: bool = True  # False: the effect ignores the key (shows what the audit catches)

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> WorkArgs:
        return cls(
            seed=int(args.get("seed", 1)),
            transient=float(args.get("transient", 0.0)),
            permanent=float(args.get("permanent", 0.0)),
            duration=str(args.get("duration", "exp:0.3")),
            duration_max=float(args.get("duration_max", 3.0)),
            idempotent=bool(args.get("idempotent", True)),
        )

    def as_args(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "transient": self.transient,
            "permanent": self.permanent,
            "duration": self.duration,
            "duration_max": self.duration_max,
            "idempotent": self.idempotent,
        }


def unit(seed: int, *parts: object) -> float:
    """A number in [0, 1) that depends only on the seed and the parts."""
    text = "|".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") / 2.0**64


def is_permanent(a: WorkArgs, key: str) -> bool:
    """Whether this slot fails for good: the same answer for every attempt."""
    return unit(a.seed, key, "permanent") < a.permanent


def is_transient(a: WorkArgs, key: str, attempt: int) -> bool:
    return unit(a.seed, key, attempt, "transient") < a.transient


def parse_distribution(spec: str) -> tuple[str, list[float]]:
    """`fixed:S`, `uniform:A:B`, `exp:MEAN` or `lognormal:MEDIAN:SIGMA` (seconds); ValueError otherwise."""
    name, _, rest = spec.partition(":")
    try:
        params = [float(p) for p in rest.split(":")] if rest else []
    except ValueError:
        raise ValueError(f"{spec!r}: parameters must be numbers") from None
    wanted = {"fixed": 1, "uniform": 2, "exp": 1, "lognormal": 2}
    if name not in wanted:
        raise ValueError(f"{spec!r}: the distribution is one of {', '.join(DISTRIBUTIONS)}")
    if len(params) != wanted[name]:
        raise ValueError(f"{spec!r}: {name} takes {wanted[name]} parameter(s)")
    if any(p < 0 or not math.isfinite(p) for p in params):
        raise ValueError(f"{spec!r}: parameters must be finite and not negative")
    if name == "uniform" and params[0] > params[1]:
        raise ValueError(f"{spec!r}: uniform:A:B needs A <= B")
    return name, params


def draw_duration(a: WorkArgs, key: str, attempt: int) -> float:
    """The work's duration for this attempt, at most `duration_max` seconds."""
    name, p = parse_distribution(a.duration)
    u = min(max(unit(a.seed, key, attempt, "duration"), 1e-12), 1 - 1e-12)
    if name == "fixed":
        d = p[0]
    elif name == "uniform":
        d = p[0] + (p[1] - p[0]) * u
    elif name == "exp":
        d = -p[0] * math.log(1 - u)
    else:
        d = p[0] * math.exp(p[1] * NormalDist().inv_cdf(u))
    return min(d, a.duration_max)


_pool: ConnectionPool[Any] | None = None
_pool_lock = threading.Lock()


def _connections(worker_id: str) -> ConnectionPool[Any]:
    """One small pool per worker process, as many connections as handler threads."""
    global _pool
    with _pool_lock:
        if _pool is None:
            size = max(1, int(os.environ.get("FLEET_CONCURRENCY") or 1))
            _pool = make_pool(os.environ["FLEET_DATABASE_URL"], f"loadtest job {worker_id}", 1, size)
        return _pool


def _end(pool: ConnectionPool[Any], execution: int, outcome: str) -> None:
    """Record how an execution ended, if the database lets us (the attempt's outcome does not need it)."""
    try:
        with pool.connection(timeout=POOL_TIMEOUT_S) as conn:
            conn.execute(q("execution_end"), {"id": execution, "outcome": outcome})
    except (psycopg.Error, OSError, RuntimeError):
        pass


@fleet.job(JOB)
def work(ctx: JobContext) -> None:
    """Record the start, work, maybe fail, then apply the effect once per idempotency key."""
    entered = time.monotonic()  # the start recorded is this moment, whatever delays the insert
    a = WorkArgs.from_args(ctx.args)
    key = ctx.idempotency_key
    pool = _connections(ctx.worker_id)
    params = {
        "key": key,
        "schedule": ctx.schedule,
        "slot": ctx.slot,
        "attempt": ctx.attempt,
        "worker": ctx.worker_id,
        "pid": os.getpid(),
    }
    with pool.connection(timeout=POOL_TIMEOUT_S) as conn:
        since_entry_s = time.monotonic() - entered
        row = conn.execute(q("execution_start"), {**params, "since_entry_s": since_entry_s}).fetchone()
    assert row is not None
    execution, applied = row["id"], row["applied"]
    if ctx.wait(draw_duration(a, key, ctx.attempt)):
        _end(pool, execution, "cancelled")
        ctx.check()
    if not applied:  # a slot whose effect is in the ledger only confirms it: it cannot fail any more
        if is_permanent(a, key):
            _end(pool, execution, "permanent")
            raise fleet.Permanent(f"injected permanent failure of {key}")
        if is_transient(a, key, ctx.attempt):
            _end(pool, execution, "transient")
            raise RuntimeError(f"injected transient failure of {key}, attempt {ctx.attempt}")
    if ctx.cancelled:  # the lease was lost meanwhile: leave the effect to the attempt that holds it
        _end(pool, execution, "cancelled")
        ctx.check()
    with pool.connection(timeout=POOL_TIMEOUT_S) as conn:
        conn.execute(
            q("effect_apply" if a.idempotent else "effect_apply_unguarded"), {**params, "id": execution}
        )
