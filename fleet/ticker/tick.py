"""One tick: take due schedules in a batch, create their slots once (up to a lookahead ahead of
their time), advance them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from fleet.observe import logs
from fleet.store.queries import q
from fleet.timing.calendars import from_row
from fleet.timing.catchup import Plan, plan_slots
from fleet.timing.schedule import TimingError, saturating_add, timing_of
from fleet.timing.window import window_json

# A broken schedule (its timing could not be evaluated) is tried again this long after it broke: an
# upgraded fleet, or a time zone database that changed, may evaluate it.
RETRY_BROKEN = timedelta(minutes=10)


@dataclass
class TickResult:
    schedules: int = 0  # due schedules handled
    created: int = 0  # pending runs created
    skipped: int = 0  # rows recorded as skipped (max_lateness)
    missed: int = 0  # slots dropped by catch-up policy
    broken: int = 0  # schedules whose timing could not be evaluated, marked broken and skipped
    still_due: bool = False  # a batch or a catch-up limit was full: tick again at once


def run_once(
    conn: psycopg.Connection[Any],
    *,
    batch_size: int,
    catchup_limit: int,
    lookahead: timedelta = timedelta(0),
    now: datetime | None = None,
    trace_ids: tuple[str, str] | None = None,
) -> TickResult:
    """Materialise the slots of up to `batch_size` schedules in one transaction: those due, and
    those with a slot within `lookahead` of now.

    Due-ness and slot times come from the database: `now()` (or `now` in tests) and the stored
    `next_run_at`, the first slot not created yet. Past slots go through the catch-up policy; the
    slots in (now, now + lookahead] are created pending with `run_after` = the slot, so no worker
    claims one before its time, and with `start_by` = the slot + its grace (`fleet.ticker.settle`).
    Concurrent tickers skip each other's locked schedules, and the primary key with ON CONFLICT DO
    NOTHING makes each slot one row even if two tickers ever overlap.

    A schedule whose planning raises is one schedule's problem: it is marked broken with the error
    (one line naming the field), its next slot stays, and every other schedule of the batch goes on.
    """
    result = TickResult()
    with conn.transaction():
        rows = conn.execute(
            q("schedule_due"),
            {"now": now, "lookahead": lookahead, "limit": batch_size, "retry_broken": RETRY_BROKEN},
        ).fetchall()
        if not rows:
            return result
        names: list[str] = []
        slots: list[datetime] = []
        statuses: list[str] = []
        reasons: list[str | None] = []
        start_bys: list[datetime | None] = []  # a slot created ahead: its slot + offset + grace
        windows: list[str | None] = []  # the window a run is created with: the slots folded into it
        adv_names: list[str] = []
        adv_next: list[datetime | None] = []
        adv_missed: list[int] = []
        broken_names: list[str] = []
        broken_errors: list[str] = []
        for row in rows:
            try:
                plan = _plan(row, catchup_limit, lookahead)
            except Exception as e:  # noqa: BLE001 - whatever one schedule raises stays with it
                error = _error_line(e, row)
                broken_names.append(row["name"])
                broken_errors.append(error)
                if row["broken_at"] is None:
                    logs.event("schedule_broken", schedule=row["name"], error=error)
                continue
            # The first slot planned stands for the slots folded into it (plan.collapsed).
            folded = window_json(plan.collapsed)
            first = min([*plan.run, *(slot for slot, _ in plan.skipped)]) if folded else None
            offset = row["spread_offset"]
            for slot in plan.run:
                names.append(row["name"])
                slots.append(slot)
                statuses.append("pending")
                reasons.append(None)
                grace = plan.ahead_grace
                start_bys.append(
                    saturating_add(slot, offset + grace)
                    if grace is not None and slot > row["db_now"]
                    else None
                )
                windows.append(folded if slot == first else None)
            for slot, reason in plan.skipped:
                names.append(row["name"])
                slots.append(slot)
                statuses.append("skipped")
                reasons.append(reason)
                start_bys.append(None)
                windows.append(folded if slot == first else None)
            adv_names.append(row["name"])
            adv_next.append(plan.next_run_at)
            adv_missed.append(plan.missed)
            if plan.missed:
                logs.event(
                    "slots_missed",
                    schedule=row["name"],
                    count=plan.missed,
                    policy=row["catchup"],
                    since=row["next_run_at"],
                )
            if plan.next_run_at is not None and plan.next_run_at <= row["db_now"] + lookahead:
                result.still_due = True  # the catch-up limit cut the plan short
        result.schedules = len(rows)
        result.broken = len(broken_names)
        if broken_names:
            conn.execute(q("schedule_break"), {"names": broken_names, "errors": broken_errors, "now": now})
        result.still_due = result.still_due or len(rows) == batch_size
        result.missed = sum(adv_missed)
        if names:
            created = conn.execute(
                q("slot_materialize"),
                {
                    "names": names,
                    "slots": slots,
                    "statuses": statuses,
                    "reasons": reasons,
                    "start_bys": start_bys,
                    "windows": windows,
                    "origin": "schedule",
                    "now": now,
                    "trace_id": trace_ids[0] if trace_ids else None,
                    "span_id": trace_ids[1] if trace_ids else None,
                },
            ).fetchall()
            result.created = sum(1 for r in created if r["status"] == "pending")
            result.skipped = sum(1 for r in created if r["status"] == "skipped")
        if adv_names:
            conn.execute(
                q("schedule_advance"), {"names": adv_names, "next_run_ats": adv_next, "missed": adv_missed}
            )
        if result.created:
            conn.execute(q("run_notify"))  # delivered at commit: workers wake at once
    return result


def _plan(row: dict[str, Any], catchup_limit: int, lookahead: timedelta) -> Plan:
    """The plan of one due schedule's row; raises whatever its timing raises."""
    plan = plan_slots(
        timing_of(row),
        row["catchup"],
        row["next_run_at"],
        row["db_now"],
        grace=row["grace"],
        max_lateness=row["max_lateness"],
        limit=catchup_limit,
        max_catchup=row["max_catchup"],
        lookahead=lookahead,
        offset=row["spread_offset"],
        calendar=from_row(row["calendar"], row["timezone"]),
    )
    if plan.ended:
        logs.event("schedule_ended", schedule=row["name"], until=row["calendar"].get("until"))
        return plan  # no slot is left before its `until`: next_run_at None, and never due again
    if plan.next_run_at is None:
        planned = [*plan.run, *(slot for slot, _ in plan.skipped)]
        if not planned:
            raise TimingError(f"{_timing_field(row)}: no slot after {row['next_run_at'].isoformat()}")
        # Create what was planned; the next tick looks past the last of it and finds nothing.
        plan.next_run_at = max(planned) + timedelta(microseconds=1)
    return plan


def _timing_field(row: dict[str, Any]) -> str:
    return "cron" if row["cron"] is not None else "every"


def _error_line(e: Exception, row: dict[str, Any]) -> str:
    """The error as one line that names the field: a TimingError's own text starts with it."""
    if isinstance(e, TimingError):
        return " ".join(str(e).split())[:500]
    return f"{_timing_field(row)}: {logs.error_text(e)}"
