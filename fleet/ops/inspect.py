"""`fleetctl status | runs | show | workers`: what the fleet is doing and how healthy each schedule is."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson
import psycopg

from fleet import health, inspect
from fleet.client import Client
from fleet.ops.cli import UsageError, client, db
from fleet.ops.targets import iso, parse_instant, require_schedules
from fleet.queries import q
from fleet.registry import STALE_AFTER_S
from fleet.results import RUN_STATUSES, ScheduleHealth
from fleet.telemetry import DEFAULT_JAEGER_URL, jaeger_search_url

SLOT_HELP = "the slot, ISO-8601 (e.g. 2026-11-02T10:00:00Z; no offset: UTC)"
DEFAULT_RUNS_LIMIT = inspect.DEFAULT_RUNS_LIMIT


def schedule_health(
    conn: psycopg.Connection[Any], names: Sequence[str] | None = None, now: datetime | None = None
) -> list[ScheduleHealth]:
    """Health of the named schedules (all when `names` is None), by name, as `fleetctl status` and
    `fleet.Client.status` give it; unknown names raise UnknownSchedule."""
    return inspect.schedule_health(conn, names, now)


# -- output --------------------------------------------------------------------------------------


def human(seconds: float | None) -> str:
    """A duration for people: ``850ms``, ``42s``, ``3m05s``, ``2h10m``, ``3d04h``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; None prints as ``-``."""
    cells = [list(header)] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def moment(text: str | None) -> str | None:
    """An ISO instant cut to milliseconds, for tables (slots are always printed in full)."""
    if text is None or "." not in text:
        return text
    head, _, tail = text.partition(".")
    return f"{head}.{tail[:3]}Z"


def print_json(value: Any) -> None:
    print(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode())


def _first_line(text: str | None, width: int = 100) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


# -- commands ------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    with client(args) as c:
        found = c.status(args.schedules or None)
    if args.json:
        print_json([h.to_json() for h in found])
    elif not found:
        print("no schedules")
    else:
        print(
            table(
                [
                    "SCHEDULE",
                    "VERDICT",
                    "LAST SUCCESS",
                    "DEAD",
                    "OLDEST PENDING",
                    "NEXT SLOT",
                    "LAST OUTCOME",
                    "INTERVAL",
                    "NOTE",
                ],
                [
                    [
                        h.name,
                        health.verdict_text(h.verdict, h.job, h.job_served),
                        f"{human(h.since_last_success_s)} ago"
                        if h.since_last_success_s is not None
                        else "never",
                        h.dead_runs,
                        human(h.oldest_pending_age_s),
                        iso(h.next_run_at),
                        h.last_outcome,
                        human(h.interval_s),
                        _first_line(h.pause_note, 60),
                    ]
                    for h in found
                ],
            )
        )
    return 0 if all(h.healthy for h in found) else 1


def cmd_runs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError(f"--limit: must be at least 1, got {args.limit}")
    with client(args) as c:
        runs = [r.to_json() for r in c.runs(args.schedule, args.status, args.limit)]
    if args.json:
        print_json(runs)
    elif not runs:
        print(f"no runs of {args.schedule}" + (f" with status {args.status}" if args.status else ""))
    else:
        print(
            table(
                ["SLOT", "STATUS", "ORIGIN", "ATTEMPTS", "STARTED", "FINISHED", "OUTCOME", "ERROR"],
                [
                    [
                        r["slot"],
                        r["status"],
                        r["origin"],
                        r["attempts"],
                        moment(r["started_at"]),
                        moment(r["finished_at"]),
                        r["last_outcome"],
                        _first_line(r["last_error"], 60),
                    ]
                    for r in runs
                ],
            )
        )
    return 0


def slot_history(
    c: Client, schedule: str, slot: datetime, jaeger: str = DEFAULT_JAEGER_URL
) -> dict[str, Any]:
    """The run at `slot` and every attempt of it, the one in flight included, and the Jaeger
    search that finds every attempt's trace."""
    return {**c.show(schedule, slot).to_json(), "jaeger_url": jaeger_search_url(jaeger, schedule, slot)}


def cmd_show(args: argparse.Namespace) -> int:
    slot = parse_instant(args.slot, "SLOT")
    with client(args) as c:
        h = slot_history(c, args.schedule, slot, jaeger_base(args))
    if args.json:
        print_json(h)
        return 0
    print(
        f"{h['schedule']} @ {h['slot']}: {h['status']} (origin {h['origin']}, job {h['job']}, "
        f"{h['attempts']} attempt(s), {h['failures']} counted as failures)"
    )
    if h["status"] == "pending":
        print(f"due at {h['run_after']}")
    if h["last_error"]:
        print(f"last error: {h['last_error'].strip()}")
    if h["created_trace_id"]:
        print(f"created by trace {h['created_trace_id']}")
    if not h["attempt_history"]:
        print("no attempt yet")
        return 0
    print(
        table(
            ["ATTEMPT", "WORKER", "HOST", "PID", "STARTED", "ENDED", "OUTCOME", "TRACE", "SPAN", "ERROR"],
            [
                [
                    a["attempt"],
                    a["worker_id"],
                    a["host"],
                    a["pid"],
                    moment(a["started_at"]),
                    moment(a["finished_at"]),
                    a["outcome"],
                    a["trace_id"],
                    a["span_id"],
                    _first_line(a["error"]),
                ]
                for a in h["attempt_history"]
            ],
        )
    )
    print(f"jaeger: {h['jaeger_url']}")
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """Each attempt's trace and span ids, and the Jaeger search for the slot."""
    slot = parse_instant(args.slot, "SLOT")
    with client(args) as c:
        h = slot_history(c, args.schedule, slot, jaeger_base(args))
    if args.json:
        print_json(
            {
                "schedule": h["schedule"],
                "slot": h["slot"],
                "jaeger_url": h["jaeger_url"],
                "created_trace_id": h["created_trace_id"],
                "attempts": [
                    {k: a[k] for k in ("attempt", "worker_id", "outcome", "trace_id", "span_id")}
                    for a in h["attempt_history"]
                ],
            }
        )
        return 0
    if h["created_trace_id"]:
        print(f"created by: trace {h['created_trace_id']} span {h['created_span_id']}")
    for a in h["attempt_history"]:
        print(
            f"attempt {a['attempt']}: trace {a['trace_id']} span {a['span_id']} "
            f"({a['outcome']}, {a['worker_id']})"
        )
    print(f"jaeger: {h['jaeger_url']}")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    """Dead runs waiting for an operator (retry or discard), across schedules."""
    with db(args) as conn:
        require_schedules(conn, args.schedules)
        rows = conn.execute(
            q("run_dead_list"), {"names": list(args.schedules), "limit": args.limit}
        ).fetchall()
    runs = [
        {
            "schedule": r["schedule_name"],
            "slot": iso(r["scheduled_for"]),
            "attempts": r["attempts"],
            "failures": r["failures"],
            "finished_at": iso(r["finished_at"]),
            "last_error": r["last_error"],
            "trace_id": r["trace_id"],
        }
        for r in rows
    ]
    if args.json:
        print_json(runs)
    elif not runs:
        print("no dead runs")
    else:
        print(
            table(
                ["SCHEDULE", "SLOT", "ATTEMPTS", "DIED", "ERROR"],
                [
                    [
                        r["schedule"],
                        r["slot"],
                        r["attempts"],
                        moment(r["finished_at"]),
                        _first_line(r["last_error"]),
                    ]
                    for r in runs
                ],
            )
        )
    return 1 if runs else 0


def jaeger_base(args: argparse.Namespace) -> str:
    return str(getattr(args, "jaeger_url", None) or os.environ.get("FLEET_JAEGER_URL") or DEFAULT_JAEGER_URL)


def live_processes(conn: psycopg.Connection[Any], now: datetime | None = None) -> list[dict[str, Any]]:
    """Tickers and workers seen within STALE_AFTER_S, with the runs each holds now."""
    return [
        {
            "id": p["id"],
            "kind": p["kind"],
            "host": p["host"],
            "pid": p["pid"],
            "jobs": list(p["jobs"]),
            "running": p["running"],
            "started_at": iso(p["started_at"]),
            "last_seen_at": iso(p["seen_at"]),
            "last_seen_s_ago": round(p["seen_s_ago"], 3),
        }
        for p in conn.execute(q("process_list"), {"now": now, "stale_s": STALE_AFTER_S})
    ]


def cmd_workers(args: argparse.Namespace) -> int:
    with db(args) as conn:
        procs = live_processes(conn)
    if args.json:
        print_json(procs)
    elif not procs:
        print(f"no live ticker or worker (none seen in the last {STALE_AFTER_S}s)")
    else:
        print(
            table(
                ["ID", "KIND", "HOST", "PID", "RUNNING", "LAST SEEN", "STARTED", "JOBS"],
                [
                    [
                        p["id"],
                        p["kind"],
                        p["host"],
                        p["pid"],
                        p["running"],
                        f"{human(p['last_seen_s_ago'])} ago",
                        moment(p["started_at"]),
                        ",".join(p["jobs"]) or "-",
                    ]
                    for p in procs
                ],
            )
        )
    return 0


def add_commands(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "status",
        help="health of each schedule; exit 1 when any is unhealthy (a monitoring check)",
        description=(
            "Per schedule: time since the last success, dead runs, age of the oldest due pending run, the "
            "next slot, the last outcome and a verdict: DEAD (dead runs waiting for retry or discard), "
            "NO-WORKER (runs whose job no live worker registered), BACKLOG (a due run waiting longer than "
            "one interval), LATE (no success for more than two intervals of the schedule's own cadence), "
            "PAUSED, DISABLED or OK. Exit code: 0 all healthy (OK, PAUSED, DISABLED), 1 any unhealthy, "
            "2 bad input such as an unknown schedule."
        ),
    )
    p.add_argument("schedules", nargs="*", metavar="SCHEDULE", help="only these schedules (default: all)")
    p.add_argument("--json", action="store_true", help="a JSON list, durations in seconds")

    p = sub.add_parser("runs", help="a schedule's runs, newest slot first")
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("--status", choices=RUN_STATUSES, help="only runs with this status")
    p.add_argument(
        "--limit", type=int, default=DEFAULT_RUNS_LIMIT, help=f"at most N runs ({DEFAULT_RUNS_LIMIT})"
    )
    p.add_argument("--json", action="store_true", help="a JSON list")

    p = sub.add_parser("show", help="one slot's whole history, attempt by attempt")
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("slot", metavar="SLOT", help=SLOT_HELP)
    p.add_argument("--json", action="store_true", help="JSON")

    p.add_argument("--jaeger-url", help="Jaeger UI address [env FLEET_JAEGER_URL] (http://localhost:16686)")

    p = sub.add_parser("trace", help="one slot's trace and span ids per attempt, and its Jaeger search link")
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("slot", metavar="SLOT", help=SLOT_HELP)
    p.add_argument("--json", action="store_true", help="JSON")
    p.add_argument("--jaeger-url", help="Jaeger UI address [env FLEET_JAEGER_URL] (http://localhost:16686)")

    p = sub.add_parser("dead", help="dead runs waiting for retry or discard; exit 1 when there are any")
    p.add_argument("schedules", nargs="*", metavar="SCHEDULE", help="only these schedules (default: all)")
    p.add_argument(
        "--limit", type=int, default=DEFAULT_RUNS_LIMIT, help=f"at most N runs ({DEFAULT_RUNS_LIMIT})"
    )
    p.add_argument("--json", action="store_true", help="a JSON list")

    p = sub.add_parser("workers", help=f"live tickers and workers (seen in the last {STALE_AFTER_S}s)")
    p.add_argument("--json", action="store_true", help="a JSON list")
    return {
        "status": cmd_status,
        "runs": cmd_runs,
        "show": cmd_show,
        "workers": cmd_workers,
        "trace": cmd_trace,
        "dead": cmd_dead,
    }
