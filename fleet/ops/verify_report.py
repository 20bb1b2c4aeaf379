"""`fleetctl verify`: the slot ledger of a window, a line per schedule; exit 1 when a slot is missing
without a recorded reason."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson

from fleet.errors import UsageError
from fleet.health.ledger import MISS_REASONS, SKIP_POLICIES, ScheduleLedger, Verification
from fleet.health.verify import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_WINDOW,
    DEFAULT_RETENTION,
    MAX_LIMIT,
    MAX_WINDOW_LIMIT,
    span_text,
    verify,
)
from fleet.observe.printable import printable
from fleet.ops.connection import db
from fleet.ops.targets import iso, parse_age, parse_count, parse_instant
from fleet.timing.schedfile import MAX_RETENTION, MIN_RETENTION

# How each outcome reads in a schedule's line, in the line's order.
_WORDS = {
    "once": "ran once",
    "retried": "after retries",
    "reclaimed": "reclaimed",
    "skipped": "skipped",
    "dead": "dead",
    "pending": "pending",
    "running": "running",
    "never_started": "never started",
    "unplanned": "not created yet",
    "pruned": "past retention",
    "missed": "missed",
    "unexplained": "UNEXPLAINED",
}
_LABELS = {"since": "--since", "until": "--until", "max_window": "--max-window"}


def cmd_verify(args: argparse.Namespace) -> int:
    since = parse_instant(args.since, "--since") if args.since is not None else None
    until = parse_instant(args.until, "--until") if args.until is not None else None
    limit = parse_count(args.limit, "--limit", high=MAX_LIMIT)
    max_window = parse_age(args.max_window, "--max-window", MAX_WINDOW_LIMIT)
    if max_window <= timedelta(0):
        raise UsageError(f"--max-window: must be positive, got {args.max_window!r}")
    retention = retention_setting(args.retention)
    with db(args) as conn:
        result = verify(
            conn,
            args.schedule,
            since,
            until,
            retention=retention,
            max_window=max_window,
            limit=limit,
            labels=_LABELS,
        )
    if args.json:
        print(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        print("\n".join(report_lines(result)))
    return 0 if result.ok else 1


def retention_setting(value: str | None) -> timedelta | None:
    """--retention, else FLEET_RETENTION (the tickers' setting), else 30 days; None for `off`."""
    flag = "--retention" if value is not None else "FLEET_RETENTION"
    raw = value if value is not None else os.environ.get("FLEET_RETENTION", "")
    if not raw.strip():
        return DEFAULT_RETENTION
    if raw.strip().lower() == "off":
        return None
    span = parse_age(raw, flag, MAX_RETENTION)
    if span < MIN_RETENTION:
        raise UsageError(f"{flag}: must be from 1h to {MAX_RETENTION.days}d, or off; got {raw!r}")
    return span


# -- output ----------------------------------------------------------------------------------------


def report_lines(result: Verification) -> list[str]:
    """The text report: the window, a line per schedule with the unexplained slots under it, and a
    last line saying whether every slot is accounted for."""
    lines = [f"window {iso(result.since)} .. {iso(result.until)} ({span_text(result.until - result.since)})"]
    for ledger in result.schedules:
        lines += schedule_lines(ledger)
    slots = sum(s.slots for s in result.schedules)
    lost = [s for s in result.schedules if not s.ok]
    n = len(result.schedules)
    if not result.schedules:
        lines.append("verify: no schedule to verify")
    elif not lost:
        lines.append(f"verify: every slot accounted for ({slots} slot(s) of {n} schedule(s))")
    else:
        missing = sum(s.counts["unexplained"] for s in lost)
        errors = sum(1 for s in lost if s.error is not None)
        text = (
            f"verify: {missing} slot(s) missing without a recorded reason in {len(lost) - errors} schedule(s)"
        )
        if errors:
            text += f"; {errors} schedule(s) whose slots cannot be enumerated"
        lines.append(text)
    return lines


def schedule_lines(ledger: ScheduleLedger) -> list[str]:
    """One schedule's summary line (slots per outcome), then its unexplained ranges."""
    head = f"{printable(ledger.name)} ({printable(ledger.timing)})"
    if ledger.error is not None:
        return [f"{head}: cannot enumerate its slots: {printable(ledger.error)}  FAIL"]
    parts = []
    for outcome, word in _WORDS.items():
        n = ledger.counts[outcome]
        if not n:
            continue
        if outcome == "skipped":
            word += _detail(ledger.skipped, SKIP_POLICIES)
        elif outcome == "missed":
            word += _detail(ledger.missed, MISS_REASONS)
        parts.append(f"{n} {word}")
    extra = []
    if ledger.not_a_slot:
        extra.append(f"{ledger.not_a_slot} run(s) not at a slot of the timing")
    if ledger.by_operator:
        extra.append(f"{ledger.by_operator} slot(s) run by an operator (backfill or trigger)")
    if ledger.created_twice:
        extra.append(f"{ledger.created_twice} slot(s) created twice")
    if ledger.ended_at is not None:
        if ledger.start > ledger.end:
            return [f"{head}: no slot: it ended at {iso(ledger.ended_at)} (until), before the window  ok"]
        extra.append(f"ended at {iso(ledger.ended_at)} (until)")
    if ledger.start > ledger.end:
        return [f"{head}: no slot: it starts at {iso(ledger.start)}, after the window  ok"]
    text = f"{head}: {ledger.slots} slot(s) from {iso(ledger.start)}: {', '.join(parts) or 'none'}"
    if extra:
        text += "; " + ", ".join(extra)
    lines = [f"{text}  {'ok' if ledger.ok else 'FAIL'}"]
    shown = 0
    for entry in ledger.entries:
        if entry.outcome != "unexplained":
            continue
        span = iso(entry.first) if entry.slots == 1 else f"{iso(entry.first)} .. {iso(entry.last)}"
        lines.append(f"  unexplained: {span} ({entry.slots} slot(s)): {printable(entry.reason)}")
        shown += entry.slots
    rest = ledger.counts["unexplained"] - shown
    if rest:
        lines.append(f"  ... and {rest} more unexplained slot(s) (raise --limit, or see --json)")
    return lines


def _detail(by: dict[str, int], order: tuple[str, ...]) -> str:
    return " (" + ", ".join(f"{k.replace('_', ' ')} {by[k]}" for k in order if by[k]) + ")"


# -- the command -----------------------------------------------------------------------------------


def add_commands(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "verify",
        help="prove every slot of a window ran once: each schedule's slots reconciled with its runs; "
        "exit 1 when a slot is missing without a recorded reason",
        description="For each schedule (every enabled one by default), enumerate the slots its timing "
        "yields in the window, from the timing alone, and say what became of each: ran once, after "
        "retries, reclaimed, skipped (by which policy, the calendar's excluded dates among them), "
        "dead, pending, running, never started, not "
        "created yet, past retention, missed with a recorded reason (paused, broken, disabled, before "
        "the schedule existed, under an earlier timing, dropped by catch-up) or missed without one. "
        "Exit code: 0 every slot accounted for, 1 a slot missing without a recorded reason (or a "
        "timing that cannot be evaluated), 2 bad input.",
    )
    p.add_argument(
        "--schedule",
        action="append",
        metavar="S",
        help="only this schedule (repeatable; default: every enabled schedule)",
    )
    p.add_argument(
        "--since",
        metavar="T",
        help="start of the window, ISO-8601 (no offset: UTC); default: 24 hours before --until",
    )
    p.add_argument(
        "--until", metavar="T", help="end of the window, ISO-8601 (no offset: UTC); default and latest: now"
    )
    p.add_argument(
        "--limit",
        default=str(DEFAULT_LIMIT),
        metavar="N",
        help=f"ranges of slots listed per schedule, 1 to {MAX_LIMIT}, unexplained ones first "
        f"({DEFAULT_LIMIT})",
    )
    p.add_argument(
        "--retention",
        metavar="DURATION",
        help="the tickers' default retention, for schedules without their own: slots older than it may "
        "have lost their runs to it (1h to 3660d, or off) [env FLEET_RETENTION] (30d)",
    )
    p.add_argument(
        "--max-window",
        default=span_text(DEFAULT_MAX_WINDOW),
        metavar="DURATION",
        help=f"the longest window accepted, up to {MAX_WINDOW_LIMIT.days}d ({span_text(DEFAULT_MAX_WINDOW)})",
    )
    p.add_argument("--json", action="store_true", help="per schedule, the counts and the ranges of slots")
    return {"verify": cmd_verify}
