"""What the load test's faults cost, from the database: start lag, how fast the runs of a killed,
stopped or restarted worker were taken over, why slots were executed more than once, and the
per-second series of the timeline."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from fleet.jobs import idempotency_key

Key = tuple[str, datetime]


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile (p in [0, 100]); None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def fault_explains(faults: list[dict[str, Any]], execution: dict[str, Any], end: datetime) -> bool:
    """Whether a fault can have cut `execution` off before `end`: its own process was killed, stopped or
    restarted (the pid is what counts: a kill lands a moment after the clock read before it), or the
    database was restarted or starved meanwhile."""
    for f in faults:
        if f["kind"] in ("worker_kill", "zombie", "worker_restart"):
            if f["pid"] == execution["pid"] and f["at"] <= end:
                return True
        elif f["at"] <= end and (f["ended_at"] or f["at"]) >= execution["started_at"]:
            return True
    return False


def repeat_cause(previous_outcome: str | None) -> str:
    return {
        "transient": "retry after an injected error",
        "permanent": "after a permanent failure",
        "applied": "again after the effect was applied",
        "already": "again after the effect was applied",
    }.get(previous_outcome or "", "the previous attempt was cut off (kill, stall, restart, outage)")


def stats(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": rounded(percentile(values, 50)),
        "p99": rounded(percentile(values, 99)),
        "max": rounded(max(values) if values else None),
    }


def rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def reclaims(
    faults: list[dict[str, Any]],
    attempts: dict[Key, dict[int, dict[str, Any]]],
    start: datetime,
    bound: float,
    outages: list[tuple[datetime, datetime]],
) -> list[dict[str, Any]]:
    """For each run a killed, stopped or restarted worker held: when its next attempt started, and by whom."""
    out = []
    for f in faults:
        if f["kind"] not in ("worker_kill", "zombie", "worker_restart"):
            continue
        at: datetime = f["at"]
        in_outage = any(
            o_start <= at + timedelta(seconds=bound) and at <= o_end for o_start, o_end in outages
        )
        for h in f["held"]:
            k = (h["schedule"], datetime.fromisoformat(h["slot"]))
            held = attempts.get(k, {}).get(h["attempt"])
            nxt = attempts.get(k, {}).get(h["attempt"] + 1)
            if held is not None and held["outcome"] in ("lease_expired", "handed_back") and nxt is not None:
                outcome = "reclaimed" if held["outcome"] == "lease_expired" else "handed back and retaken"
                delay, by = (nxt["started_at"] - at).total_seconds(), nxt["worker_id"]
            elif held is not None and held["outcome"] not in ("lease_expired", "handed_back"):
                outcome, delay, by = f"ended {held['outcome']} by its own worker", None, held["worker_id"]
            else:
                outcome, delay, by = "not found in the attempt history", None, None
            out.append(
                {
                    "kind": f["kind"],
                    "fault_id": f["id"],
                    "target": f["target"],
                    "at_s": round((at - start).total_seconds(), 3),
                    "slot_key": idempotency_key(*k),
                    "attempt": h["attempt"],
                    "outcome": outcome,
                    "delay_s": rounded(delay),
                    "by": by,
                    "in_outage": in_outage,
                }
            )
    return out


def series(
    start: datetime,
    end: datetime,
    drained: datetime | None,
    runs: dict[Key, dict[str, Any]],
    attempts: dict[Key, dict[int, dict[str, Any]]],
    lags: dict[Key, float],
) -> dict[str, list[Any]]:
    """Per second from the window's start to the drain: runs done, attempts started, start lag."""
    last = drained or end
    n = max(1, math.ceil((last - start).total_seconds()) + 1)

    def sec(t: datetime | None) -> int | None:
        if t is None:
            return None
        i = math.floor((t - start).total_seconds())
        return i if 0 <= i < n else None

    done = [0.0] * n
    started = [0.0] * n
    failed = [0.0] * n
    for k, r in runs.items():
        i = sec(r["finished_at"]) if r["status"] == "done" else None
        if i is not None:
            done[i] += 1
        for a in attempts.get(k, {}).values():
            j = sec(a["started_at"])
            if j is not None:
                started[j] += 1
            j = sec(a["finished_at"])
            if j is not None and a["outcome"] not in ("done", "handed_back"):
                failed[j] += 1
    by_slot: dict[int, list[float]] = defaultdict(list)
    for k, lag in lags.items():
        i = sec(k[1])
        if i is not None:
            by_slot[i].append(lag)
    return {
        "t_s": [float(i) for i in range(n)],
        "done_per_s": done,
        "attempts_started_per_s": started,
        "attempts_failed_per_s": failed,
        "lag_p50_s": [percentile(by_slot[i], 50) if by_slot.get(i) else None for i in range(n)],
        "lag_max_s": [max(by_slot[i]) if by_slot.get(i) else None for i in range(n)],
    }
