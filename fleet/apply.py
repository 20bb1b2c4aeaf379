"""Applying schedules: make the database's schedules match a list of specs, all or nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg
from psycopg.types.json import Jsonb

from fleet.queries import q
from fleet.schedfile import ScheduleSpec
from fleet.schedule import first_slot_at_or_after


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    replanned: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)


def _params(spec: ScheduleSpec, next_run_at: datetime | None) -> dict[str, Any]:
    t = spec.timing
    return {
        "name": spec.name,
        "every": t.every,
        "cron": t.cron,
        "timezone": t.timezone,
        "start_at": spec.start_at,
        "dst_repeated": t.dst_repeated,
        "dst_missing": t.dst_missing,
        "job": spec.job,
        "args": Jsonb(spec.args, dumps=lambda o: orjson.dumps(o).decode()),
        "catchup": spec.catchup,
        "max_lateness": spec.max_lateness,
        "grace": spec.grace,
        "overlap": spec.overlap,
        "timeout": spec.timeout,
        "max_attempts": spec.max_attempts,
        "retry_base": spec.retry_base,
        "retry_cap": spec.retry_cap,
        "next_run_at": next_run_at,
        "timing_hash": spec.timing_hash(),
    }


def apply_specs(
    conn: psycopg.Connection[Any], specs: list[ScheduleSpec], *, prune: bool, now: datetime | None = None
) -> ApplyResult:
    """Create and update fleet.schedules in one transaction (and disable the others with `prune`).

    A new schedule's first slot is the first at or after `start_at` (or the database's now()); a
    `start_at` in the past is downtime the catch-up policy handles. A changed timing, or a schedule
    enabled again, re-plans from now(); slots already created stay.
    """
    result = ApplyResult()
    with conn.transaction():
        conn.execute(q("schedule_lock_apply"))
        row = conn.execute(q("schedule_db_now"), {"now": now}).fetchone()
        assert row is not None
        db_now: datetime = row["now"]
        existing = {r["name"]: r for r in conn.execute(q("schedule_existing")).fetchall()}
        for spec in specs:
            old = existing.get(spec.name)
            if old is None:
                start = spec.start_at if spec.start_at is not None else db_now
                conn.execute(q("schedule_insert"), _params(spec, first_slot_at_or_after(spec.timing, start)))
                result.created.append(spec.name)
                continue
            replan = old["timing_hash"] != spec.timing_hash() or not old["enabled"]
            nxt = first_slot_at_or_after(spec.timing, db_now + timedelta(microseconds=1)) if replan else None
            changed = conn.execute(q("schedule_update"), _params(spec, nxt)).rowcount
            if replan:
                result.replanned.append(spec.name)
            elif changed:
                result.updated.append(spec.name)
            else:
                result.unchanged.append(spec.name)
        if prune:
            names = [s.name for s in specs]
            result.disabled = [
                r["name"] for r in conn.execute(q("schedule_disable_missing"), {"names": names})
            ]
        conn.execute(q("schedule_notify"))  # running tickers pick the change up at once
    return result
