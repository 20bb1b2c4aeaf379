"""`fleetctl retry | discard | trigger | pause | resume | backfill | prune`: an operator's repairs.

Each repair is one short statement (or one visible transaction) and is idempotent: running it twice
changes nothing the second time. Naming an unknown schedule or slot changes nothing and exits 2 with
a one-line message naming it. Retry, discard, trigger, pause and resume go through `fleet.Client`
(`fleet.admin.repair`), so an application that makes them through the client takes the same path. Each
but prune records an audit row of what it changed (`--by`, `--note`: fleet.admin.audit).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg

from fleet.admin.audit import audit_record, check_by, check_note, slots_detail
from fleet.admin.repair import trigger_args
from fleet.client import Client
from fleet.errors import RequestError, UsageError
from fleet.ops.connection import client, db
from fleet.ops.targets import iso, parse_age, parse_count, parse_instant, schedule_row
from fleet.store.queries import q
from fleet.timing.schedfile import EARLIEST_START, shown
from fleet.timing.schedule import TimingError, slots_between, timing_of

# A backfill larger than this is refused: it would flood the workers (narrow the range instead).
MAX_BACKFILL_SLOTS = 10_000
# Pruning deletes in batches this large, each its own short transaction, with a short breather
# between them so that the workers' commits do not queue behind a stream of prune WAL.
PRUNE_BATCH = 5_000
PRUNE_PAUSE_S = 0.02
MAX_PRUNE_BATCH = 100_000
MAX_PRUNE_AGE = timedelta(days=36_500)


def _wake_workers(conn: psycopg.Connection[Any]) -> None:
    conn.execute(q("run_notify"))


# -- backfill ------------------------------------------------------------------------------------


@dataclass
class BackfillResult:
    created: list[datetime]
    existing: int  # slots in the range that already had a run


def slot_backfill(
    conn: psycopg.Connection[Any],
    schedule: str,
    start: datetime,
    end: datetime,
    now: datetime | None = None,
    *,
    by: str | None = None,
    note: str | None = None,
) -> BackfillResult:
    """Create the schedule's slots in [start, end] that have no run yet (origin 'backfill', due now),
    with an audit row of them.

    The range must lie between 1970 and now and hold at most MAX_BACKFILL_SLOTS slots; a second
    call creates nothing new.
    """
    row = schedule_row(conn, schedule, now)
    if start < EARLIEST_START:  # no schedule starts earlier (start_at is 1970 or later)
        raise UsageError(f"--from {iso(start)} is before {iso(EARLIEST_START)}: no slot is that old")
    if start > end:
        raise UsageError(f"--from {iso(start)} is after --to {iso(end)}")
    if end > row["db_now"]:
        raise UsageError(f"--to {iso(end)} is in the future: backfill creates past slots only")
    try:
        slots = slots_between(timing_of(row), start, end, MAX_BACKFILL_SLOTS + 1)
    except TimingError as e:
        raise UsageError(f"{schedule}: {e}") from None
    if len(slots) > MAX_BACKFILL_SLOTS:
        raise UsageError(
            f"{schedule} has more than {MAX_BACKFILL_SLOTS} slots from {iso(start)} to {iso(end)}: "
            "narrow the range"
        )
    with conn.transaction():
        created = [
            r["scheduled_for"]
            for r in conn.execute(q("slot_backfill"), {"name": schedule, "slots": slots, "now": now})
        ]
        if created:
            detail = {**slots_detail(sorted(created)), "from": iso(start), "to": iso(end)}
            audit_record(conn, "backfill", [schedule], [detail], by=by, note=note)
            _wake_workers(conn)
    return BackfillResult(created=sorted(created), existing=len(slots) - len(created))


# -- prune ---------------------------------------------------------------------------------------


@dataclass
class PruneResult:
    cutoff: datetime
    runs: int = 0
    attempts: int = 0
    batches: int = 0
    # the runs by what they were: done, skipped, and discarded (dead runs an operator discarded)
    done: int = 0
    skipped: int = 0
    discarded: int = 0

    def add(self, row: dict[str, Any]) -> None:
        for k in ("runs", "attempts", "done", "skipped", "discarded"):
            setattr(self, k, getattr(self, k) + int(row[k]))


def _prune_scope(
    conn: psycopg.Connection[Any], older_than: timedelta, schedule: str | None, now: datetime | None
) -> tuple[PruneResult, dict[str, Any]]:
    """The cutoff, and the statement parameters naming what pruning never deletes: per schedule
    the newest successful and the newest finished run."""
    if schedule is not None:
        schedule_row(conn, schedule)
    clock = conn.execute(q("clock_read"), {"now": now}).fetchone()
    assert clock is not None
    db_now: datetime = clock["now"]
    result = PruneResult(cutoff=db_now - older_than)
    keep_names: list[str] = []
    keep_slots: list[datetime] = []
    for k in conn.execute(q("run_prune_keep"), {"schedule": schedule}):
        for slot in {k["done_slot"], k["finished_slot"]} - {None}:
            keep_names.append(k["name"])
            keep_slots.append(slot)
    params = {
        "cutoff": result.cutoff,
        "schedule": schedule,
        "keep_names": keep_names,
        "keep_slots": keep_slots,
    }
    return result, params


def run_prune_count(
    conn: psycopg.Connection[Any],
    older_than: timedelta,
    *,
    schedule: str | None = None,
    now: datetime | None = None,
) -> PruneResult:
    """What `run_prune` with the same arguments would delete now, counted; nothing is deleted."""
    result, params = _prune_scope(conn, older_than, schedule, now)
    row = conn.execute(q("run_prune_count"), params).fetchone()
    assert row is not None
    result.add(row)
    return result


def run_prune(
    conn: psycopg.Connection[Any],
    older_than: timedelta,
    *,
    schedule: str | None = None,
    batch: int = PRUNE_BATCH,
    pause_s: float = PRUNE_PAUSE_S,
    now: datetime | None = None,
    on_batch: Callable[[PruneResult], None] | None = None,
    keep_outcomes: bool = True,
) -> PruneResult:
    """Delete runs that finished more than `older_than` ago (done, skipped, discarded; never an
    unacknowledged dead run) with their attempts, in batches of `batch`, each its own short
    transaction that skips locked rows. The newest successful and the newest finished run of each
    schedule are always kept, so health stays computable. Each slot's outcome stays in the slot
    ledger (`fleet.slot_outcomes`, for `verify`) unless `keep_outcomes` is false. The result
    counts what was deleted.
    """
    result, params = _prune_scope(conn, older_than, schedule, now)
    after = datetime.min.replace(tzinfo=result.cutoff.tzinfo)
    while True:
        with conn.transaction():
            if not keep_outcomes:
                conn.execute(q("outcome_keep_none"))
            row = conn.execute(q("run_prune"), {**params, "after": after, "limit": batch}).fetchone()
        assert row is not None
        if not row["runs"]:
            return result
        result.add(row)
        result.batches += 1
        # the next batch starts where this one ended: the index scan need not step over the
        # entries of rows deleted a moment ago
        after = row["last_finished_at"]
        if on_batch:
            on_batch(result)
        time.sleep(pause_s)


# -- commands ------------------------------------------------------------------------------------


def _slots(slots: list[datetime]) -> str:
    shown = ", ".join(str(iso(s)) for s in slots[:5])
    return shown + (f" and {len(slots) - 5} more" if len(slots) > 5 else "")


def _who(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """--by and --note, checked (exit 2 naming the flag): who says they act, and why."""
    return check_by(args.by, "--by"), check_note(args.note, "--note")


def _retry(
    c: Client, schedule: str, slot: datetime | None, by: str | None, note: str | None
) -> list[datetime]:
    if slot is None:
        return c.retry_dead(schedule, by=by, note=note)
    return c.retry(schedule, slot, by=by, note=note)


def _discard(
    c: Client, schedule: str, slot: datetime | None, by: str | None, note: str | None
) -> list[datetime]:
    if slot is None:
        return c.discard_dead(schedule, by=by, note=note)
    return c.discard(schedule, slot, by=by, note=note)


def _on_dead_runs(
    args: argparse.Namespace,
    action: Callable[[Client, str, datetime | None, str | None, str | None], list[datetime]],
    done: str,
    already: str,
    verb: str,
) -> int:
    """retry and discard: one SLOT or --all-dead of a schedule; a second call changes nothing."""
    if args.all_dead == (args.slot is not None):
        raise UsageError("give either SLOT or --all-dead")
    slot = parse_instant(args.slot, "SLOT") if args.slot is not None else None
    by, note = _who(args)
    with client(args) as c:
        changed = action(c, args.schedule, slot, by, note)
    if changed:
        print(f"{done.format(n=len(changed))} of {args.schedule}: {_slots(changed)}")
    elif slot is not None:
        print(f"{args.schedule} @ {iso(slot)} is {already}")
    else:
        print(f"{args.schedule} has no dead run: nothing to {verb}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    return _on_dead_runs(
        args, _retry, "retried {n} run(s)", "already pending or running: nothing to retry", "retry"
    )


def cmd_discard(args: argparse.Namespace) -> int:
    return _on_dead_runs(args, _discard, "discarded {n} dead run(s)", "already discarded", "discard")


def _job_args(text: str | None) -> dict[str, Any] | None:
    """`--args`: a JSON object that a run can store (at most 64 KiB, no NUL character), or None when
    the flag is not given."""
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise UsageError(f"--args: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise UsageError(f'--args: must be a JSON object such as \'{{"format": "csv"}}\', got {shown(text)}')
    try:
        trigger_args(value, "--args")
    except RequestError as e:
        raise UsageError(str(e)) from None
    return value


def cmd_trigger(args: argparse.Namespace) -> int:
    job_args = _job_args(args.args)
    by, note = _who(args)
    with client(args) as c:
        t = c.trigger(args.schedule, job_args, by=by, note=note)
    slot, created = t.slot, t.created
    if created:
        print(f"triggered {args.schedule} @ {iso(slot)}")
    else:
        unused = "; the --args given were not used (trigger in the next second for a run with them)"
        print(
            f"{args.schedule} @ {iso(slot)} exists already: not triggered again{unused if job_args else ''}"
        )
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    by, note = _who(args)
    with client(args) as c:
        paused = c.pause(args.schedule, note=note, by=by)
    print(f"paused {args.schedule}" if paused else f"{args.schedule} is paused already")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    by, note = _who(args)
    with client(args) as c:
        nxt = c.resume(args.schedule, note=note, by=by)
    print(f"resumed {args.schedule}: next slot {iso(nxt)}" if nxt else f"{args.schedule} is not paused")
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    start, end = parse_instant(args.start, "--from"), parse_instant(args.end, "--to")
    by, note = _who(args)
    with db(args) as conn:
        r = slot_backfill(conn, args.schedule, start, end, by=by, note=note)
    if r.created:
        print(f"backfilled {len(r.created)} slot(s) of {args.schedule}: {_slots(r.created)}")
    if r.existing:
        print(f"{r.existing} slot(s) in the range had a run already")
    if not r.created and not r.existing:
        print(f"{args.schedule} has no slot from {iso(start)} to {iso(end)}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    older_than = parse_age(args.older_than, "--older-than", MAX_PRUNE_AGE)
    batch = parse_count(args.batch, "--batch", high=MAX_PRUNE_BATCH)
    started = time.monotonic()
    with db(args) as conn:
        if args.dry_run:
            r = run_prune_count(conn, older_than, schedule=args.schedule)
        else:
            keep = not args.no_ledger
            r = run_prune(conn, older_than, schedule=args.schedule, batch=batch, keep_outcomes=keep)
    print(prune_summary(r, dry_run=args.dry_run, elapsed_s=time.monotonic() - started))
    return 0


def prune_summary(r: PruneResult, *, dry_run: bool, elapsed_s: float) -> str:
    """What prune deleted (or with `dry_run` would delete), by status."""
    what = f"{r.runs} run(s) and {r.attempts} attempt(s) finished before {iso(r.cutoff)}"
    kinds = ", ".join(
        f"{n} {label}"
        for n, label in (
            (r.done, "done"),
            (r.skipped, "skipped"),
            (r.discarded, "discarded (dead runs an operator discarded, with their errors)"),
        )
        if n
    )
    if dry_run:
        return f"would prune {what}" + (f": {kinds}" if kinds else "") + "; nothing deleted (--dry-run)"
    return f"pruned {what} in {r.batches} batch(es), {elapsed_s:.1f}s" + (f": {kinds}" if kinds else "")


def add_who(p: argparse.ArgumentParser, note: bool = True) -> None:
    """--by (and --note): what the command's audit row says of who acted and why."""
    p.add_argument(
        "--by",
        metavar="NAME",
        help="who acts, recorded with the database role in the audit row (`fleetctl audit`; at most "
        "100 characters)",
    )
    if note:
        p.add_argument(
            "--note", metavar="TEXT", help="why, recorded in the audit row (at most 500 characters)"
        )


def add_commands(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    slot_help = "the slot, ISO-8601 (e.g. 2026-11-02T10:00:00Z; no offset: UTC)"
    p = sub.add_parser(
        "retry",
        help="make a dead run pending again (attempt history kept, retry budget restarted)",
    )
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("slot", metavar="SLOT", nargs="?", help=slot_help)
    p.add_argument("--all-dead", action="store_true", help="every dead run of the schedule")
    add_who(p)

    p = sub.add_parser(
        "discard",
        help="acknowledge a dead run so the schedule is healthy again",
        description="A discarded run becomes 'skipped' with last outcome 'discarded'. Its error and attempts "
        "stay (until prune deletes it) and `fleetctl retry` can still bring it back.",
    )
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("slot", metavar="SLOT", nargs="?", help=slot_help)
    p.add_argument("--all-dead", action="store_true", help="every dead run of the schedule")
    add_who(p)

    p = sub.add_parser(
        "trigger",
        help="run a schedule now, as its own slot (once per second, however often called)",
        description="Creates a run whose slot is the database's now() truncated to the second (origin "
        "'trigger'). Under overlap 'skip' the run waits for a run in progress instead of being skipped.",
    )
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument(
        "--args",
        metavar="JSON",
        help="a JSON object of at most 64 KiB: the job's arguments for this run, not the schedule's "
        "(readable by every fleet role: no place for a secret)",
    )
    add_who(p)

    p = sub.add_parser(
        "pause",
        help="stop creating slots for a schedule and hold its retries (runs already due or running "
        "still run)",
        description="Pausing stops the ticker creating the schedule's slots, and removes the runs "
        "created ahead of their time and not due yet. A run waiting to retry after a failed attempt is "
        "held: its next attempt waits for the resume. A run already due (or triggered) still starts "
        "once, an attempt in progress goes on, and one whose worker died is taken over as usual.",
    )
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument(
        "--note", metavar="TEXT", help="why, shown by `fleetctl status` (replaces an earlier note)"
    )
    add_who(p, note=False)
    p = sub.add_parser(
        "resume",
        help="create slots again; the next slot is planned from now, so the paused time is not caught up",
        description="Resuming re-plans the next slot from the database's now(): the slots that came due "
        "while the schedule was paused are never created, however long the pause (use backfill for them).",
    )
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument(
        "--note",
        metavar="TEXT",
        help="a note shown by `fleetctl status` (without one: the pause's is cleared)",
    )
    add_who(p, note=False)

    p = sub.add_parser(
        "backfill",
        help="create a schedule's past slots in a time range that have no run yet",
        description=f"Creates the missing slots in [--from, --to] (origin 'backfill', due now); slots that "
        f"have a run are left alone, so running it twice creates nothing new. At most {MAX_BACKFILL_SLOTS} "
        "slots at once. Under overlap 'skip' backfilled runs queue and run one after the other.",
    )
    p.add_argument("schedule", metavar="SCHEDULE")
    p.add_argument("--from", dest="start", required=True, metavar="T", help="ISO-8601 (no offset: UTC)")
    p.add_argument(
        "--to", dest="end", required=True, metavar="T", help="ISO-8601 (no offset: UTC), not in the future"
    )
    add_who(p)

    p = sub.add_parser(
        "prune",
        help="delete old finished runs and their attempts, in short batches",
        description="Deletes done, skipped and discarded runs that finished more than DURATION ago, with "
        "their attempts, in short transactions that never wait for a lock, and says how many of each it "
        "deleted. Dead runs nobody discarded stay, and so do the newest successful and the newest finished "
        "run of each schedule. Each deleted run's outcome stays in the slot ledger (16 bytes a slot) for "
        "`fleetctl verify`, unless --no-ledger.",
    )
    p.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help=f"with its unit: e.g. 7d, 12h, 30m (w, d, h, m, s; at most {MAX_PRUNE_AGE.days}d)",
    )
    p.add_argument("--schedule", metavar="SCHEDULE", help="only this schedule's runs")
    p.add_argument(
        "--batch",
        default=str(PRUNE_BATCH),
        metavar="N",
        help=f"runs per transaction, 1 to {MAX_PRUNE_BATCH} ({PRUNE_BATCH})",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted, by status; delete nothing"
    )
    p.add_argument(
        "--no-ledger",
        action="store_true",
        help="keep no outcome of the deleted runs (verify then calls their slots past retention)",
    )
    return {
        "retry": cmd_retry,
        "discard": cmd_discard,
        "trigger": cmd_trigger,
        "pause": cmd_pause,
        "resume": cmd_resume,
        "backfill": cmd_backfill,
        "prune": cmd_prune,
    }
