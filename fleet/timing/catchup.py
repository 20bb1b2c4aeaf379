"""Which of a schedule's due slots to create, run or record as skipped: the catch-up policy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fleet.timing.calendars import Calendar
from fleet.timing.schedfile import MAX_GRACE, CatchUp, default_grace
from fleet.timing.schedule import (
    DROPPED_COUNT_LIMIT,
    Timing,
    TimingError,
    count_slots,
    first_slot_at_or_after,
    format_duration,
    latest_slot_at_or_before,
    newest_slots_from,
    next_slot,
    nominal_interval,
    saturating_add,
    slots_and_next,
    slots_between,
)
from fleet.timing.window import Collapsed

_MICROSECOND = timedelta(microseconds=1)


@dataclass
class Plan:
    """What one tick does for one schedule."""

    run: list[datetime] = field(default_factory=list)
    skipped: list[tuple[datetime, str]] = field(default_factory=list)
    missed: int = 0  # slots dropped by the policy without a row (skip / latest)
    next_run_at: datetime | None = None
    # The grace of the slots in `run` that are created ahead of their time (those after now): each
    # must be started, or seen due by a ticker, within it (see `settle_stale`).
    ahead_grace: timedelta | None = None
    # The slots dropped without a row in favour of the first slot planned (under `latest`, and
    # under `all` past `max_catchup`): that run's window names them.
    collapsed: Collapsed | None = None
    # The calendar's `until` is past: no slot is left to plan (next_run_at is None).
    ended: bool = False


def plan_slots(
    timing: Timing,
    catchup: CatchUp,
    next_run_at: datetime,
    now: datetime,
    *,
    grace: timedelta | None,
    max_lateness: timedelta | None,
    limit: int,
    max_catchup: int | None = None,
    lookahead: timedelta = timedelta(0),
    offset: timedelta = timedelta(0),
    calendar: Calendar | None = None,
) -> Plan:
    """Plan the slots in [next_run_at, now + lookahead] (`now` is the database's).

    A slot is on time when materialised within `grace` of its time (default min(60 s, interval/2));
    older ones are missed: `skip` drops them, `latest` keeps only the newest when nothing is on time,
    `all` keeps them all. With `max_catchup`, at most the newest that many slots of [next_run_at, now]
    are kept, counted as slots whatever the cadence: under `all` of them all, under `skip` and
    `latest` of the on-time ones (so a long grace cannot create more either); the older ones are
    counted missed without a row. Any slot kept but older than `max_lateness` is recorded as skipped.
    Then, once every slot up to `now` is planned, the slots in (now, now + lookahead] are kept too,
    to be created ahead of their time, with the grace they get in `ahead_grace`. At most `limit`
    slots are handled; when more remain, next_run_at stays within the horizon so the next tick
    goes on. The work is bounded by `limit` and `max_catchup` slots, and date arithmetic saturates
    rather than overflowing; a timing that cannot be evaluated raises TimingError.

    `offset` is the schedule's start spread offset: its runs start that long after their slots, so
    lateness (the grace, max_lateness) counts from the slot plus the offset. Under `latest` and
    `all`, the slots dropped without a row before the first slot planned are its `collapsed`.
    With a `calendar`, a slot the policy keeps that falls on an excluded date is recorded skipped
    with a reason starting ``calendar:`` instead (slots it drops stay dropped: the policy works on
    the timing's slots); slots after its `until` are neither created nor counted, and once the
    plan reaches one the schedule has ended (`ended`, next_run_at None). An excluded slot within the
    lookahead is recorded skipped ahead of its time like the others are created (an apply that
    changes the calendar withdraws it, as it withdraws runs created ahead).
    """
    plan = _plan_due(
        timing,
        catchup,
        next_run_at,
        now,
        grace=grace,
        max_lateness=max_lateness,
        limit=limit,
        max_catchup=max_catchup,
        offset=offset,
    )
    if calendar is not None and _calendar_due(plan, calendar):
        return plan
    nxt = plan.next_run_at
    room = limit - len(plan.run) - len(plan.skipped)
    # Slots ahead only after the past is done: a catch-up cut short by the limit goes first.
    if nxt is not None and nxt > now and lookahead and room > 0:
        try:
            ahead, after = slots_and_next(timing, nxt, now + lookahead, room)
        except TimingError:
            ahead, after = slots_between(timing, nxt, now + lookahead, room), None
            if ahead:
                after = ahead[-1] + _MICROSECOND  # looked past the last of them again next tick
        planned = bool(ahead)
        if calendar is not None:
            ahead, after = _calendar_ahead(ahead, after, calendar, plan)
        if ahead:
            plan.run.extend(ahead)
            plan.ahead_grace = _grace(timing, grace, nxt)
        if planned:
            plan.next_run_at = after
    return plan


def _calendar_due(plan: Plan, calendar: Calendar) -> bool:
    """Apply the calendar to the due part of a plan; True when the schedule has ended (nothing is
    to be planned ahead)."""
    ended = False
    run: list[datetime] = []
    skipped: list[tuple[datetime, str]] = []
    for slot in plan.run:
        if calendar.ended(slot):
            ended = True
            continue
        excluded = calendar.excluded(slot)
        if excluded is not None:
            skipped.append((slot, calendar.reason(excluded)))
        else:
            run.append(slot)
    for slot, why in plan.skipped:
        if calendar.ended(slot):
            ended = True
            continue
        excluded = calendar.excluded(slot)
        skipped.append((slot, calendar.reason(excluded) if excluded is not None else why))
    plan.run = run
    plan.skipped = sorted(skipped)
    if not run and not skipped:
        plan.collapsed = None  # the calendar ended before the slot that stood for them: none is left
    if ended or (plan.next_run_at is not None and calendar.ended(plan.next_run_at)):
        plan.next_run_at, plan.ended = None, True
    return plan.ended


def _calendar_ahead(
    ahead: list[datetime], after: datetime | None, calendar: Calendar, plan: Plan
) -> tuple[list[datetime], datetime | None]:
    """The slots to create ahead of their time: the excluded ones go to the plan's skipped, those
    after `until` are dropped (the schedule then ends); and the next slot to plan."""
    run: list[datetime] = []
    for slot in ahead:
        if calendar.ended(slot):
            plan.ended = True
            return run, None
        excluded = calendar.excluded(slot)
        if excluded is not None:
            plan.skipped.append((slot, calendar.reason(excluded)))
        else:
            run.append(slot)
    if after is not None and calendar.ended(after):
        plan.ended = True
        return run, None
    return run, after


def _grace(timing: Timing, grace: timedelta | None, at: datetime) -> timedelta:
    """The schedule's grace, or its default from the cadence around `at`."""
    if grace is not None:
        return grace
    try:
        return default_grace(nominal_interval(timing, at))
    except TimingError:
        return MAX_GRACE  # no cadence around `at` (no slot left): its missed slots still count


def _plan_due(
    timing: Timing,
    catchup: CatchUp,
    next_run_at: datetime,
    now: datetime,
    *,
    grace: timedelta | None,
    max_lateness: timedelta | None,
    limit: int,
    max_catchup: int | None,
    offset: timedelta = timedelta(0),
) -> Plan:
    """The catch-up policy over the slots in [next_run_at, now]."""
    if next_run_at > now:
        return Plan(next_run_at=next_run_at)
    grace = _grace(timing, grace, now)
    plan = Plan()
    # Lateness counts from when a slot's run starts: its slot plus the spread offset.
    late_now = saturating_add(now, -offset)
    on_time_from = saturating_add(late_now, -grace)
    if catchup == "all":
        # However the slots came to be missed, only the newest max_catchup are caught up.
        slots, plan.missed = _newest(timing, next_run_at, now, max_catchup, limit)
        for s in slots:
            _keep(plan, s, late_now, max_lateness)
        plan.next_run_at = _next_slot(timing, slots[-1] if slots else now)
        if plan.missed and slots:
            plan.collapsed = _collapsed(timing, next_run_at, slots[0], plan.missed)
        return plan

    # On time: within the grace period, and (a long grace) among the newest max_catchup slots.
    on_time, dropped = _newest(timing, max(next_run_at, on_time_from), now, max_catchup, limit)
    missed = 0
    if next_run_at < on_time_from:
        missed = count_slots(timing, next_run_at, on_time_from - _MICROSECOND, DROPPED_COUNT_LIMIT)
    if catchup == "latest" and missed and not on_time:
        newest = latest_slot_at_or_before(timing, on_time_from - _MICROSECOND)
        if newest is not None and newest >= next_run_at:
            _keep(plan, newest, late_now, max_lateness)
            missed -= 1
    plan.missed = missed + dropped
    for s in on_time:
        _keep(plan, s, late_now, max_lateness)
    last = on_time[-1] if len(on_time) == limit else now
    plan.next_run_at = _next_slot(timing, last)
    if catchup == "latest" and plan.missed:
        first = min([*plan.run, *(slot for slot, _ in plan.skipped)], default=None)
        if first is not None:
            plan.collapsed = _collapsed(timing, next_run_at, first, plan.missed)
    return plan


def _collapsed(timing: Timing, start: datetime, before: datetime, counted: int) -> Collapsed | None:
    """The slots in [start, before), which the plan dropped (`counted` of them, as the policy
    counted them: up to DROPPED_COUNT_LIMIT), with the first and the last; an interval's are
    counted exactly. None when there are none. Informational: a timing that cannot say leaves it
    out rather than failing the plan."""
    try:
        first = first_slot_at_or_after(timing, start)
        last = latest_slot_at_or_before(timing, before - _MICROSECOND)
    except (TimingError, OverflowError):
        return None
    if first is None or last is None or first > last:
        return None
    if timing.every is not None:
        counted = (last - first) // timing.every + 1
    return Collapsed(counted, first, last)


def _next_slot(timing: Timing, after: datetime) -> datetime | None:
    """The next slot, or None when there is none to be found: the slots planned so far are kept
    (the ticker marks the schedule broken once nothing is left to plan)."""
    try:
        return next_slot(timing, after)
    except TimingError:
        return None


def _newest(
    timing: Timing, start: datetime, now: datetime, max_catchup: int | None, limit: int
) -> tuple[list[datetime], int]:
    """The first `limit` of the newest `max_catchup` slots in [start, now], and how many slots come
    before those newest ones.

    Counted in slots, whatever the cadence. One walk from `start` finds them when the range holds
    at most that many (every tick but those of a long catch-up); only a range holding more is
    counted from its end.
    """
    bound = limit if max_catchup is None else min(limit, max_catchup)
    head = slots_between(timing, start, now, bound + 1)
    if len(head) <= bound:
        return head, 0
    if max_catchup is not None:
        begin, dropped = newest_slots_from(timing, start, now, max_catchup)
        if dropped:
            return slots_between(timing, begin, now, limit), dropped
    return head[:bound], 0


def _keep(plan: Plan, slot: datetime, now: datetime, max_lateness: timedelta | None) -> None:
    late = _too_late(slot, now, max_lateness)
    if late is not None:
        plan.skipped.append((slot, late))
    else:
        plan.run.append(slot)


def _too_late(slot: datetime, now: datetime, max_lateness: timedelta | None) -> str | None:
    """Why a slot kept by the policy is still skipped: older than max_lateness."""
    if max_lateness is not None and now - slot > max_lateness:
        return f"max_lateness: {now - slot} late (limit {max_lateness})"
    return None


@dataclass(frozen=True)
class StaleRun:
    """A run created ahead of its time that no worker started, and no ticker saw due, by `start_by`
    (its slot plus its grace): a slot missed as surely as one a stopped ticker never created."""

    slot: datetime
    start_by: datetime
    run_after: datetime | None = None  # when it became claimable: its slot plus the spread offset


def settle_stale(
    catchup: CatchUp,
    stale: Sequence[StaleRun],
    newer: int,
    now: datetime,
    *,
    max_lateness: timedelta | None,
    max_catchup: int | None,
) -> list[str | None]:
    """For each of one schedule's stale runs (oldest first): None to run it, else why it is skipped.

    They are missed slots, settled as the catch-up policy settles slots created late: `skip` skips
    each; `latest` runs the newest unless one of the `newer` runs (the schedule's runs with a later
    slot up to now) is there; `all` runs the newest `max_catchup` less the newer runs. A run kept but
    older than `max_lateness` is skipped, as at creation.
    """
    kept_from = len(stale) - min(stale_room(catchup, len(stale), newer, max_catchup), len(stale))
    out: list[str | None] = []
    for i, run in enumerate(stale):
        due = run.slot if run.run_after is None else max(run.slot, run.run_after)
        if i < kept_from:
            grace = format_duration(run.start_by - due)
            why = _WHY_DROPPED[catchup].format(max_catchup=max_catchup)
            out.append(f"catchup {catchup}: not started within its grace ({grace}){why}")
        else:
            out.append(_too_late(run.slot, saturating_add(now, run.slot - due), max_lateness))
    return out


def stale_room(catchup: CatchUp, stale: int, newer: int, max_catchup: int | None) -> int:
    """How many of `stale` runs the policy runs, with `newer` runs of later slots due: `latest` one
    unless a newer one is there, `all` up to `max_catchup` less the newer ones, `skip` none."""
    if catchup == "all":
        return stale if max_catchup is None else max(0, max_catchup - newer)
    if catchup == "latest":
        return 0 if newer else 1
    return 0


def settled_collapsed(
    catchup: CatchUp, stale: Sequence[StaleRun], decided: Sequence[str | None]
) -> Collapsed | None:
    """The stale runs skipped in favour of the first one kept (what `settle_stale` decided), which
    that run's window names: under `latest` and `all`, the runs before it; None when none."""
    if catchup == "skip":
        return None
    kept = next((i for i, why in enumerate(decided) if why is None), None)
    if not kept:
        return None
    return Collapsed(kept, stale[0].slot, stale[kept - 1].slot)


_WHY_DROPPED: dict[CatchUp, str] = {
    "skip": "",
    "latest": "; a newer slot runs instead",
    "all": "; older than the newest {max_catchup} slots caught up",
}
