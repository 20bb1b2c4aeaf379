"""One tick: take due schedules in a batch, create their slots once (up to a lookahead ahead of
their time), advance them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

import psycopg

from fleet.observe import logs
from fleet.store.queries import q
from fleet.timing.calendars import from_row
from fleet.timing.catchup import Plan, StaleRun, plan_slots, settle_stale, stale_room
from fleet.timing.schedule import DROPPED_COUNT_LIMIT, TimingError, saturating_add, timing_of
from fleet.timing.window import Collapsed, window_json

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
        plans: list[tuple[dict[str, Any], Plan]] = []
        for row in rows:
            try:
                plans.append((row, _plan(row, catchup_limit, lookahead)))
            except Exception as e:  # noqa: BLE001 - whatever one schedule raises stays with it
                error = _error_line(e, row)
                broken_names.append(row["name"])
                broken_errors.append(error)
                if row["broken_at"] is None:
                    logs.event("schedule_broken", schedule=row["name"], error=error)
        stale = _stale_runs(conn, plans, now)
        settle_names: list[str] = []
        settle_slots: list[datetime] = []
        settle_reasons: list[str] = []
        for row, plan in plans:
            # The first slot planned stands for the slots folded into it (plan.collapsed), and for
            # the schedule's stale runs that it leaves no room for, skipped here in its favour.
            runs = stale.get(row["name"], [])
            collapsed, skipped = _fold_stale(row, plan, runs)
            if skipped:
                settle_names += [row["name"]] * len(runs)
                settle_slots += [run.slot for run in runs]
                settle_reasons += skipped
                logs.event(
                    "stale_runs_settled",
                    schedule=row["name"],
                    policy=row["catchup"],
                    kept=0,
                    skipped=len(runs),
                    since=runs[0].slot,
                )
            folded = window_json(collapsed)
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
                # Missed slots are counted up to a limit: past it, the count is a floor.
                capped = plan.missed >= DROPPED_COUNT_LIMIT
                logs.event(
                    "slots_missed",
                    schedule=row["name"],
                    count=plan.missed,
                    policy=row["catchup"],
                    since=row["next_run_at"],
                    **({"at_least": True} if capped else {}),
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
        if settle_names:
            conn.execute(
                q("run_settle"),
                {
                    "names": settle_names,
                    "slots": settle_slots,
                    "reasons": settle_reasons,
                    "windows": [None] * len(settle_names),
                    "now": now,
                },
            )
        if adv_names:
            conn.execute(
                q("schedule_advance"), {"names": adv_names, "next_run_ats": adv_next, "missed": adv_missed}
            )
        if result.created:
            conn.execute(q("run_notify"))  # delivered at commit: workers wake at once
    return result


def _stale_runs(
    conn: psycopg.Connection[Any], plans: list[tuple[dict[str, Any], Plan]], now: datetime | None
) -> dict[str, list[StaleRun]]:
    """The stale runs (created ahead, missed: see fleet.ticker.settle) of the schedules that catch
    up (`latest`, `all`) and plan a run already due, by schedule, oldest first. (A running fleet's
    usual tick creates slots ahead of their time, and asks nothing.)"""
    names = [
        row["name"]
        for row, plan in plans
        if row["catchup"] != "skip" and any(slot <= row["db_now"] for slot in plan.run)
    ]
    if not names:
        return {}
    rows = conn.execute(q("run_stale"), {"names": names, "now": now}).fetchall()
    return {
        name: [StaleRun(r["scheduled_for"], r["start_by"], r["run_after"]) for r in group]
        for name, group in groupby(rows, key=lambda r: r["schedule_name"])
    }


def _fold_stale(row: dict[str, Any], plan: Plan, stale: list[StaleRun]) -> tuple[Collapsed | None, list[str]]:
    """The slots folded into the plan's first run, and why each stale run is skipped (none when it
    is left to fleet.ticker.settle): when the runs the plan makes due leave the stale runs no room
    (`latest`: one of them; `all`: `max_catchup` of them), they are skipped in its favour in this
    tick, and its window names them with the slots the plan missed without a row."""
    if not stale:
        return plan.collapsed, []
    due = sum(1 for slot in plan.run if slot <= row["db_now"])
    if stale_room(row["catchup"], len(stale), due, row["max_catchup"]):
        return plan.collapsed, []
    decided = settle_stale(
        row["catchup"],
        stale,
        due,
        row["db_now"],
        max_lateness=row["max_lateness"],
        max_catchup=row["max_catchup"],
    )
    reasons = [why for why in decided if why is not None]
    assert len(reasons) == len(stale)  # no room: none is kept
    folded = Collapsed(len(stale), stale[0].slot, stale[-1].slot)
    c = plan.collapsed
    if c is not None:
        folded = Collapsed(folded.count + c.count, min(folded.first, c.first), max(folded.last, c.last))
    return folded, reasons


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
