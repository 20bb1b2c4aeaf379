"""`fleetctl status | runs | show | workers`: what the fleet is doing and how healthy each schedule is."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
import psycopg

from fleet.errors import UsageError
from fleet.health import reading
from fleet.health.verdicts import FLEET_VERDICTS, retrying_text
from fleet.observe.printable import printable, printable_lines
from fleet.ops.connection import db
from fleet.ops.jaeger import DEFAULT_JAEGER_URL, jaeger_search_url
from fleet.ops.targets import iso, parse_count, parse_instant, require_schedules, run_row
from fleet.store.queries import q
from fleet.store.registry import STALE_AFTER_S

if TYPE_CHECKING:
    from fleet.health.results import ScheduleHealth
    from fleet.health.verdicts import FleetHealth

RUN_STATUSES = ("pending", "running", "done", "dead", "skipped", "discarded")
SLOT_HELP = "the slot, ISO-8601 (e.g. 2026-11-02T10:00:00Z; no offset: UTC)"
DEFAULT_RUNS_LIMIT = 20
MAX_RUNS_LIMIT = 10_000  # what one listing prints at most
WIDTH = 100  # the columns `show` fits in (a Jaeger link excepted)


def schedule_health(
    conn: psycopg.Connection[Any], names: Sequence[str] | None = None, now: datetime | None = None
) -> list[ScheduleHealth]:
    """Health of the named schedules (all when `names` is None), by name, as `fleetctl status` and
    `fleet.Client.status` give it; unknown names raise UnknownSchedule."""
    return reading.schedule_health(conn, names, now)


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
    """Left-aligned columns separated by two spaces; None prints as ``-``, control characters escaped."""
    return "\n".join(table_lines(header, rows))


def table_lines(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """`table` as a list of lines: the header, then one line per row."""
    cells = [list(header)] + [["-" if c is None else printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def moment(text: str | None) -> str | None:
    """An ISO instant cut to milliseconds, for tables (slots are always printed in full)."""
    if text is None or "." not in text:
        return text
    head, _, tail = text.partition(".")
    return f"{head}.{tail[:3]}Z"


def print_json(value: Any) -> None:
    print(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode())


def write_json_chunks(chunks: Iterable[list[dict[str, Any]]]) -> bool:
    """Write the schedules' health as print_json writes their list, a chunk at a time as it is
    read; True when every schedule is healthy."""
    sys.stdout.flush()
    out = sys.stdout.buffer
    healthy, first = True, True
    for chunk in chunks:
        if not chunk:
            continue
        healthy = healthy and all(v["healthy"] for v in chunk)
        # a chunk's list without its brackets: "[\n  {...},\n  {...}\n]"
        body = orjson.dumps(chunk, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z)
        out.write(b"[\n" if first else b",\n")
        out.write(memoryview(body)[2:-2])  # not copied
        first = False
    out.write(b"[]\n" if first else b"\n]\n")
    out.flush()
    return healthy


def _first_line(text: str | None, width: int = 100) -> str | None:
    """The first line of `text`, escaped, cut to `width` with ``...`` (``--full`` shows it whole)."""
    lines = printable_lines(text or "")
    if not lines:
        return None
    line = lines[0] + (" ..." if len(lines) > 1 else "")
    return line if len(line) <= width else line[: width - 3] + "..."


def wrapped(text: str, indent: str, width: int = WIDTH) -> list[str]:
    """Every line of `text`, escaped, indented and cut into pieces that fit `width` columns."""
    room = max(20, width - len(indent))
    out = []
    for line in printable_lines(text):
        pieces = [line[i : i + room] for i in range(0, len(line), room)] or [""]
        out += [f"{indent}{p}" for p in pieces]
    return out


def fleet_lines(fleet: FleetHealth, shown: Iterable[ScheduleHealth]) -> list[str]:
    """One line per fleet-wide verdict that holds for some of the `shown` schedules, printed before
    them: ``fleet: NO-TICKER: no ticker seen for 1m15s (last: ticker-a on host1 at ...)``."""
    held = {v for h in shown for v in h.problems if v in FLEET_VERDICTS}
    lines = []
    if "NO-TICKER" in held:
        last = fleet.last_ticker
        if last is None:
            why = "no ticker is registered: none has started, or the last one stopped (start fleet-ticker)"
        else:
            where = f"{printable(last.id)} on {printable(last.host)} at {moment(iso(last.seen_at))}"
            why = f"no ticker seen for {human(last.seen_s_ago)} (last: {where})"
        lines.append(f"fleet: NO-TICKER: {why}")
    crash = fleet.last_crash
    if "TICKER-CRASHING" in held and crash is not None:
        others = fleet.crashed_tickers - 1
        text = (
            f"fleet: TICKER-CRASHING: {printable(crash.id)} on {printable(crash.host)} crashed "
            f"{human(crash.crashed_s_ago)} ago ({crash.crashes} crash(es) in all)"
            + (f", and {others} other ticker(s) recently" if others > 0 else "")
        )
        error = _first_line(crash.error, 200)
        lines.append(f"{text}: {error}" if error else text)
    return lines


def _note(h: ScheduleHealth) -> str | None:
    """The NOTE column: why the schedule is broken, which run waits to retry, then the operator's note."""
    notes = [
        n
        for n in (
            _first_line(h.broken_error, 300) if h.broken_at else None,
            retrying_note(h),
            overdue_note(h),
            _first_line(h.pause_note, 60),
        )
        if n
    ]
    return " · ".join(notes) or None


def retrying_note(h: ScheduleHealth) -> str | None:
    """Which run waits to retry, when, and what it does to later slots (RETRYING), else None."""
    if "RETRYING" not in h.problems or h.retry_slot is None:
        return None
    return retrying_text(str(iso(h.retry_slot)), moment(iso(h.retry_at)), h.overlap, h.paused)


def overdue_note(h: ScheduleHealth) -> str | None:
    """Which slot's run was not done by its deadline (OVERDUE), else None."""
    if h.overdue_slot is None or h.deadline_s is None:
        return None
    due = h.overdue_slot + timedelta(seconds=h.deadline_s)
    return f"{iso(h.overdue_slot)} not done by its deadline {iso(due)}"


def verdict_text(h: ScheduleHealth) -> str:
    """The verdict, with PAUSED, DISABLED or ENDED added when a more severe verdict hides it
    (``DEAD+PAUSED``), and NO-WORKER naming the job no live worker serves (``NO-WORKER (job
    reports.nightly)``)."""
    states = [v for v in ("PAUSED", "DISABLED", "ENDED") if v in h.problems and v != h.verdict]
    text = "+".join([h.verdict, *states])
    return f"{text} (job {h.job})" if h.verdict == "NO-WORKER" and not h.job_served else text


# -- commands ------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    if args.json:
        with db(args) as conn:
            if args.schedules:
                reading.schedules_require(conn, args.schedules)
            # closed when the writing stops early (a reader that went away): the read's stream is
            # cancelled then, before the connection's rollback, which would wait for it for ever
            with contextlib.closing(reading.health_chunks(conn, args.schedules or None)) as chunks:
                return 0 if write_json_chunks(chunks) else 1
    with db(args) as conn:
        fleet, found = reading.health_report(conn, args.schedules or None)
    for line in fleet_lines(fleet, found):
        print(line)
    if not found:
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
                        verdict_text(h),
                        f"{human(h.since_last_success_s)} ago"
                        if h.since_last_success_s is not None
                        else "never",
                        h.dead_runs,
                        human(h.oldest_pending_age_s),
                        _next_slot_text(h),
                        h.last_outcome,
                        human(h.interval_s),
                        _note(h),
                    ]
                    for h in found
                ],
            )
        )
    return 0 if all(h.healthy for h in found) else 1


def _next_slot_text(h: ScheduleHealth) -> str | None:
    if h.paused:
        return "paused"
    return "disabled" if not h.enabled else iso(h.next_run_at)


def _run_json(r: dict[str, Any]) -> dict[str, Any]:
    status = "discarded" if r["status"] == "skipped" and r["last_outcome"] == "discarded" else r["status"]
    return {
        "schedule": r["schedule_name"],
        "slot": iso(r["scheduled_for"]),
        "status": status,
        "origin": r["origin"],
        "job": r["job"],
        "args": r["args"],
        "attempts": r["attempts"],
        "failures": r["failures"],
        "run_after": iso(r["run_after"]),
        "started_at": iso(r["started_at"]),
        "finished_at": iso(r["finished_at"]),
        "locked_by": r["locked_by"],
        "locked_until": iso(r["locked_until"]),
        "last_outcome": r["last_outcome"],
        "last_error": r["last_error"],
        "trace_id": r["trace_id"],
        "traced": r["traced"],
        "created_trace_id": r["created_trace_id"],
    }


def cmd_runs(args: argparse.Namespace) -> int:
    """A schedule's runs (or with --all every schedule's), newest slot first."""
    if args.all == (args.schedule is not None):
        raise UsageError("give either SCHEDULE or --all")
    limit = parse_count(args.limit, "--limit", high=MAX_RUNS_LIMIT)
    status, outcome = ("skipped", "discarded") if args.status == "discarded" else (args.status, None)
    params = {"name": args.schedule, "status": status, "outcome": outcome, "limit": limit}
    with db(args) as conn:
        if args.all:
            rows = conn.execute(q("run_list_all"), params).fetchall()
        else:
            require_schedules(conn, [args.schedule])
            rows = conn.execute(q("run_list"), params).fetchall()
    runs = [_run_json(r) for r in rows]
    if args.json:
        print_json(runs)
    elif not runs:
        whose = "any schedule" if args.all else args.schedule
        print(f"no runs of {whose}" + (f" with status {args.status}" if args.status else ""))
    else:
        print("\n".join(runs_lines(runs, every_schedule=args.all, full=args.full)))
    return 0


def runs_lines(runs: Sequence[dict[str, Any]], *, every_schedule: bool, full: bool) -> list[str]:
    """The `runs` table; with `full`, each error whole (escaped, indented) under its run instead of
    its first line cut short in the ERROR column."""
    header = ["SLOT", "STATUS", "ORIGIN", "ATTEMPTS", "STARTED", "FINISHED", "OUTCOME"]
    rows = [
        [
            r["slot"],
            r["status"],
            r["origin"],
            r["attempts"],
            moment(r["started_at"]),
            moment(r["finished_at"]),
            r["last_outcome"],
        ]
        for r in runs
    ]
    if every_schedule:
        header.insert(0, "SCHEDULE")
        for row, r in zip(rows, runs, strict=True):
            row.insert(0, r["schedule"])
    if not full:
        header.append("ERROR")
        for row, r in zip(rows, runs, strict=True):
            row.append(_first_line(r["last_error"], 60))
        return table_lines(header, rows)
    lines = table_lines(header, rows)
    out = lines[:1]
    for line, r in zip(lines[1:], runs, strict=True):
        out.append(line)
        out += [f"    {text}" for text in printable_lines(r["last_error"] or "")]
    return out


def slot_history(
    conn: psycopg.Connection[Any], schedule: str, slot: datetime, jaeger: str = DEFAULT_JAEGER_URL
) -> dict[str, Any]:
    """The run at `slot` and every attempt of it, the one in flight included, and the Jaeger
    search that finds every attempt's trace."""
    run = run_row(conn, schedule, slot)
    attempts = [
        {
            "attempt": a["attempt"],
            "worker_id": a["worker_id"],
            "host": a["host"],
            "pid": a["pid"],
            "started_at": iso(a["started_at"]),
            "finished_at": iso(a["finished_at"]),
            "outcome": a["outcome"],
            "error": a["error"],
            "trace_id": a["trace_id"],
            "span_id": a["span_id"],
            "traced": a["traced"],
            "renewed_at": iso(a["renewed_at"]),
        }
        for a in conn.execute(q("attempt_list"), {"name": schedule, "slot": slot})
    ]
    if run["status"] == "running" and all(a["attempt"] != run["attempts"] for a in attempts):
        # the current attempt is recorded in the run row until it ends
        attempts.append(
            {
                "attempt": run["attempts"],
                "worker_id": run["locked_by"],
                "host": run.get("locked_host"),
                "pid": run.get("locked_pid"),
                "started_at": iso(run["started_at"]),
                "finished_at": None,
                "outcome": "running",
                "error": None,
                "trace_id": run["trace_id"],
                "span_id": run["span_id"],
                "traced": run["traced"],
                "renewed_at": None,
            }
        )
    # Every claim makes trace ids, but only a worker with tracing on exports spans under them.
    traced = any(a["traced"] for a in attempts)
    return {
        **_run_json(run),
        # the schedule's broken mark, for the text: why no new slot of it comes
        "schedule_broken_at": iso(run.get("schedule_broken_at")),
        "schedule_broken_error": run.get("schedule_broken_error"),
        "created_span_id": run["created_span_id"],
        "attempt_history": attempts,
        "jaeger_url": jaeger_search_url(jaeger, schedule, slot) if traced else None,
    }


_SCHEDULE_KEYS = ("schedule_broken_at", "schedule_broken_error")


def cmd_show(args: argparse.Namespace) -> int:
    slot = parse_instant(args.slot, "SLOT")
    with db(args) as conn:
        h = slot_history(conn, args.schedule, slot, jaeger_base(args))
    if args.json:
        # the object `fleet.Client.show` gives; the schedule's health is `status`'s
        print_json({k: v for k, v in h.items() if k not in _SCHEDULE_KEYS})
    else:
        # every line escaped whole: besides handler text, any column could hold what a writer put there
        print("\n".join(map(printable, show_lines(h))))
    return 0


def show_lines(h: dict[str, Any]) -> list[str]:
    """A slot's history for people: the run, then one block per attempt, within WIDTH columns (a
    Jaeger link excepted)."""
    out = [
        f"{h['schedule']} @ {h['slot']}: {h['status']}",
        f"  origin {h['origin']} · job {printable(h['job'])}",
        f"  {h['attempts']} attempt(s), {h['failures']} counted as failures",
    ]
    if h.get("schedule_broken_at"):
        out.append(f"  schedule BROKEN since {moment(h['schedule_broken_at'])}: no new slot is created")
        out += wrapped(h["schedule_broken_error"] or "?", "    ")
    if h["status"] == "pending":
        out.append(f"  due at {h['run_after']}")
    if h["created_trace_id"]:
        out.append(f"  created by trace {h['created_trace_id']} span {h['created_span_id'] or '-'}")
    if h["last_error"]:
        out += ["last error:", *wrapped(h["last_error"], "  ")]
    if not h["attempt_history"]:
        out.append("no attempt yet")
    for a in h["attempt_history"]:
        out += attempt_block(a)
    if h["attempt_history"]:
        out.append(_jaeger_line(h))
    return out


def _jaeger_line(h: dict[str, Any]) -> str:
    if h["jaeger_url"]:
        return f"jaeger: {h['jaeger_url']}"
    if h["attempt_history"]:
        return "jaeger: no attempt of this slot was traced (its workers ran with tracing off)"
    return "jaeger: no attempt yet"


def attempt_block(a: dict[str, Any]) -> list[str]:
    """One attempt of `show`: its outcome, who ran it, when, its trace, its error."""
    where = " · ".join(
        f"{k} {printable(str(v))}" for k, v in (("host", a["host"]), ("pid", a["pid"])) if v is not None
    )
    took = ""
    if a["started_at"] and a["finished_at"]:
        seconds = (
            datetime.fromisoformat(a["finished_at"]) - datetime.fromisoformat(a["started_at"])
        ).total_seconds()
        took = f" · took {human(max(0.0, seconds))}"
    lines = [
        f"attempt {a['attempt']}: {a['outcome'] or 'unknown'}",
        f"  worker   {printable(a['worker_id'] or '-')}" + (f" · {where}" if where else ""),
        f"  started  {moment(a['started_at']) or '-'} · ended {moment(a['finished_at']) or '-'}{took}",
        f"  trace    {a['trace_id'] or '-'} · span {a['span_id'] or '-'}"
        + ("" if a["traced"] else " · not traced"),
    ]
    if a["error"]:
        first = _first_line(a["error"], WIDTH - 11)
        lines.append(f"  error    {first}")
    return lines


def cmd_trace(args: argparse.Namespace) -> int:
    """Each attempt's trace and span ids, and the Jaeger search for the slot."""
    slot = parse_instant(args.slot, "SLOT")
    with db(args) as conn:
        h = slot_history(conn, args.schedule, slot, jaeger_base(args))
    if args.json:
        print_json(
            {
                "schedule": h["schedule"],
                "slot": h["slot"],
                "jaeger_url": h["jaeger_url"],
                "created_trace_id": h["created_trace_id"],
                "attempts": [
                    {k: a[k] for k in ("attempt", "worker_id", "outcome", "trace_id", "span_id", "traced")}
                    for a in h["attempt_history"]
                ],
            }
        )
        return 0
    lines = (
        [f"created by: trace {h['created_trace_id']} span {h['created_span_id']}"]
        if h["created_trace_id"]
        else []
    )
    lines += [
        f"attempt {a['attempt']}: trace {a['trace_id']} span {a['span_id']} "
        f"({a['outcome']}, {a['worker_id']})" + ("" if a["traced"] else " · not traced")
        for a in h["attempt_history"]
    ]
    print("\n".join(map(printable, [*lines, _jaeger_line(h)])))
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    """Dead runs waiting for an operator (retry or discard), across schedules."""
    limit = parse_count(args.limit, "--limit", high=MAX_RUNS_LIMIT)
    with db(args) as conn:
        require_schedules(conn, args.schedules)
        rows = conn.execute(q("run_dead_list"), {"names": list(args.schedules), "limit": limit}).fetchall()
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
            "next slot, the last outcome and a verdict: BROKEN (its timing cannot be evaluated; the error is "
            "in NOTE), DEAD (dead runs waiting for retry or discard), NO-TICKER (no live ticker: nothing "
            "creates slots; said on a first 'fleet:' line), TICKER-CRASHING (a ticker recorded an unexpected "
            "error in the last few minutes; likewise), NO-WORKER (runs whose job no live worker "
            "registered), OVERDUE (the schedule has a deadline, and its newest slot past it has no "
            "successful run; NOTE names the slot), BACKLOG (a due run waiting longer than one interval), "
            "LATE (no success for more than two intervals of the schedule's own cadence), RETRYING (a run "
            "waits to retry after a failed attempt; NOTE names it and says whether later slots are "
            "skipped meanwhile), "
            "PAUSED, DISABLED, ENDED (past its calendar's until) or OK. NO-TICKER and TICKER-CRASHING "
            "concern the enabled, unpaused schedules. Exit code: 0 all healthy (OK, RETRYING, PAUSED, "
            "DISABLED, ENDED), 1 any unhealthy, "
            "2 bad input such as an unknown schedule."
        ),
    )
    p.add_argument("schedules", nargs="*", metavar="SCHEDULE", help="only these schedules (default: all)")
    p.add_argument("--json", action="store_true", help="a JSON list, durations in seconds")

    p = sub.add_parser("runs", help="a schedule's runs (or every schedule's), newest slot first")
    p.add_argument("schedule", metavar="SCHEDULE", nargs="?")
    p.add_argument("--all", action="store_true", help="the newest runs of every schedule, instead of one's")
    p.add_argument("--status", choices=RUN_STATUSES, help="only runs with this status")
    p.add_argument(
        "--limit",
        default=str(DEFAULT_RUNS_LIMIT),
        metavar="N",
        help=f"at most N runs, 1 to {MAX_RUNS_LIMIT} ({DEFAULT_RUNS_LIMIT})",
    )
    p.add_argument(
        "--full", action="store_true", help="each run's error whole, under the run (default: its first line)"
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
        "--limit",
        default=str(DEFAULT_RUNS_LIMIT),
        metavar="N",
        help=f"at most N runs, 1 to {MAX_RUNS_LIMIT} ({DEFAULT_RUNS_LIMIT})",
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
