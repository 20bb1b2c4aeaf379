"""`fleetctl audit`: who did what to the schedules (pause, resume, trigger, retry, discard, backfill,
apply), newest first."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import orjson

from fleet.admin.audit import DEFAULT_LIMIT, MAX_LIMIT, AuditRow, summary
from fleet.observe.printable import printable
from fleet.ops.connection import client
from fleet.ops.targets import iso, parse_count, parse_instant


def cmd_audit(args: argparse.Namespace) -> int:
    since = parse_instant(args.since, "--since") if args.since is not None else None
    limit = parse_count(args.limit, "--limit", high=MAX_LIMIT)
    with client(args) as c:
        rows = c.audit(args.schedule, since, limit)
    if args.json:
        print(orjson.dumps([r.to_json() for r in rows], option=orjson.OPT_INDENT_2).decode())
    elif not rows:
        print("no audit row" + (f" of {printable(args.schedule)}" if args.schedule else ""))
    else:
        for row in rows:
            print(audit_line(row))
    return 0


def audit_line(row: AuditRow) -> str:
    """One row on one line: when, the action, the schedule, who (the role, and --by), the details
    and the note, every text from the database escaped."""
    who = f"{printable(row.by)} (role {printable(row.role)})" if row.by else f"role {printable(row.role)}"
    what = printable(row.schedule) if row.schedule else "(every schedule)"
    line = f"{iso(row.at)}  {row.action:<8}  {what}  by {who}"
    detail = summary(row)
    if detail:
        line += f"  {printable(detail)}"
    if row.note:
        line += f"  note: {printable(row.note)}"
    return line


def add_commands(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "audit",
        help="who did what: the pauses, resumes, triggers, retries, discards, backfills and applies, "
        "newest first",
        description="Each operator action on a schedule leaves an audit row in the transaction of the "
        "change: when (the database's time), the database role, who the operator said they are (--by), "
        "the action, the schedule, what was done and the note. The tickers' retention removes rows "
        "older than their schedule's retention.",
    )
    p.add_argument(
        "--schedule",
        metavar="S",
        help="only this schedule's rows (and those of applies too large to record per schedule)",
    )
    p.add_argument("--since", metavar="T", help="only rows from this time on, ISO-8601 (no offset: UTC)")
    p.add_argument(
        "--limit",
        default=str(DEFAULT_LIMIT),
        metavar="N",
        help=f"at most this many rows, 1 to {MAX_LIMIT} ({DEFAULT_LIMIT})",
    )
    p.add_argument("--json", action="store_true", help="a list with one object per row")
    return {"audit": cmd_audit}
