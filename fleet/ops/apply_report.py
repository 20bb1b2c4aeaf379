"""What `fleetctl apply` prints: counts per outcome, names up to a screenful, the plan field by field,
and a warning for each schedule whose job no live worker serves."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from typing import Any

import psycopg

from fleet.admin.alert_routes import RoutesResult
from fleet.admin.apply import ApplyResult, Change
from fleet.store.registry import STALE_AFTER_S, process_live_jobs
from fleet.timing.schedfile import ScheduleSpec

# Names (and planned changes, and warnings) printed at most: a screenful; the rest are counted.
SCREENFUL = 20

_PLAN_MARK = {"create": "+", "update": "~", "replan": "~", "disable": "-"}


def _more(n: int) -> str:
    return f"... and {n:,} more"


def counts(r: ApplyResult) -> str:
    """`created 1, updated 0, replanned 0, unchanged 5, disabled 0`."""
    return ", ".join(
        f"{label} {len(names):,}"
        for label, names in (
            ("created", r.created),
            ("updated", r.updated),
            ("replanned", r.replanned),
            ("unchanged", r.unchanged),
            ("disabled", r.disabled),
        )
    )


def print_result(r: ApplyResult, total: int, sources: str) -> None:
    """One line per outcome that changed something, naming its schedules (at most a screenful in all),
    then the counts."""
    budget = SCREENFUL
    for label, names in (
        ("created", r.created),
        ("updated", r.updated),
        ("replanned", r.replanned),
        ("disabled", r.disabled),
    ):
        if not names:
            continue
        shown = names[: max(budget, 1)]
        budget -= len(shown)
        rest = f" {_more(len(names) - len(shown))}" if len(names) > len(shown) else ""
        print(f"{label}: {', '.join(shown)}{rest}")
    print(f"{counts(r)}: applied {total:,} schedule(s) from {sources}")


def print_routes(r: RoutesResult, plan: bool) -> None:
    """The alert routes' line: `alert routes: created ops-mail; created 1, updated 0, unchanged 0,
    removed 0` (in a plan: `would create ...`, the counts of what it would do, and that nothing was
    written)."""
    parts = [
        f"{'would ' + verb if plan else verb + 'd'} {', '.join(names)}"
        for verb, names in (("create", r.created), ("update", r.updated), ("remove", r.removed))
        if names
    ]
    tally = (
        f"created {len(r.created)}, updated {len(r.updated)}, unchanged {len(r.unchanged)}, "
        f"removed {len(r.removed)}"
    )
    if plan:
        tally = f"plan: {tally}; nothing was written"
    print(f"alert routes: {'; '.join([*parts, tally])}")


def _plan_lines(c: Change) -> list[str]:
    head = f"{_PLAN_MARK[c.outcome]} {c.outcome:<8} {c.name}"
    if c.outcome == "create":
        return [f"{head}: {c.summary}"]
    return [head] + [f"      {f.field}: {f.old} → {f.new}" for f in c.fields]


def print_plan(r: ApplyResult, total: int, sources: str) -> None:
    """Each schedule that would be created, changed (field by field, old → new) or disabled, up to a
    screenful, then the counts; nothing was written."""
    for c in r.changes[:SCREENFUL]:
        print("\n".join(_plan_lines(c)))
    if len(r.changes) > SCREENFUL:
        print(_more(len(r.changes) - SCREENFUL))
    print(f"plan: {counts(r)} of {total:,} schedule(s) from {sources}; nothing was written")


def warn_unserved(conn: psycopg.Connection[Any], specs: Sequence[ScheduleSpec]) -> None:
    """A warning (stderr) for each schedule whose job no live worker has registered, up to a screenful;
    one line instead when no worker is live at all."""
    if not specs:
        return
    workers, jobs = process_live_jobs(conn)
    if workers == 0:
        _warn(
            f"no worker is live (none seen in the last {STALE_AFTER_S} s): the schedules' runs wait "
            "until workers that register their jobs start"
        )
        return
    unserved = [s for s in specs if s.job not in jobs]
    known = sorted(jobs)
    for s in unserved[:SCREENFUL]:
        # a job name one typo away from a registered one is most likely that one, misspelled
        near = difflib.get_close_matches(s.job, known, n=1, cutoff=0.8)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        _warn(
            f"schedule {s.name!r}: job {s.job!r} is registered on no live worker{hint}; its runs wait for one"
        )
    if len(unserved) > SCREENFUL:
        _warn(f"{_more(len(unserved) - SCREENFUL)} schedule(s) whose job is registered on no live worker")


def warn_catchup_overlap(r: ApplyResult, specs: Sequence[ScheduleSpec]) -> None:
    """A warning (stderr) for each schedule this apply created or changed (or would) that catches up
    every missed slot (`catchup = "all"`) but skips overlapping runs (`overlap = "skip"`): the
    missed slots of an outage come due together, and each that finds an earlier one in progress
    is recorded skipped, so not all of them run."""
    touched = {c.name for c in r.changes if c.outcome != "disable"}
    both = [s for s in specs if s.name in touched and s.catchup == "all" and s.overlap == "skip"]
    for s in both[:SCREENFUL]:
        _warn(
            f'schedule {s.name!r}: catchup = "all" with overlap = "skip": after an outage its missed '
            'slots come due together and skip one another, so not all of them run; overlap = "queue" '
            "runs each in turn"
        )
    if len(both) > SCREENFUL:
        _warn(f'{_more(len(both) - SCREENFUL)} schedule(s) with catchup = "all" and overlap = "skip"')


def _warn(text: str) -> None:
    print(f"fleetctl apply: warning: {text}", file=sys.stderr)
