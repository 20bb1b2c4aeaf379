"""Which of a schedule's due slots to create, run or record as skipped: the catch-up policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fleet.schedfile import MAX_GRACE, CatchUp, default_grace
from fleet.schedule import (
    DROPPED_COUNT_LIMIT,
    Timing,
    TimingError,
    latest_slot_at_or_before,
    newest_slots_from,
    next_slot,
    nominal_interval,
    saturating_add,
    slots_and_next,
    slots_between,
)

_MICROSECOND = timedelta(microseconds=1)


@dataclass
class Plan:
    """What one tick does for one schedule."""

    run: list[datetime] = field(default_factory=list)
    skipped: list[tuple[datetime, str]] = field(default_factory=list)
    missed: int = 0  # slots dropped by the policy without a row (skip / latest)
    next_run_at: datetime | None = None


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
) -> Plan:
    """Plan the slots in [next_run_at, now + lookahead] (`now` is the database's).

    A slot is on time when materialised within `grace` of its time (default min(60 s, interval/2));
    older ones are missed: `skip` drops them, `latest` keeps only the newest when nothing is on time,
    `all` keeps them all. With `max_catchup`, at most the newest that many slots of [next_run_at, now]
    are kept, counted as slots whatever the cadence: under `all` of them all, under `skip` and
    `latest` of the on-time ones (so a long grace cannot create more either); the older ones are
    counted missed without a row. Any slot kept but older than `max_lateness` is recorded as skipped.
    Then, once every slot up to `now` is planned, the slots in (now, now + lookahead] are kept too,
    to be created ahead of their time. At most `limit` slots are handled; when more remain,
    next_run_at stays within the horizon so the next tick goes on. The work is bounded by `limit`
    and `max_catchup` slots, and date arithmetic saturates rather than overflowing; a timing that
    cannot be evaluated raises TimingError.
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
    )
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
        if ahead:
            plan.run.extend(ahead)
            plan.next_run_at = after
    return plan


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
) -> Plan:
    """The catch-up policy over the slots in [next_run_at, now]."""
    if next_run_at > now:
        return Plan(next_run_at=next_run_at)
    if grace is None:
        try:
            grace = default_grace(nominal_interval(timing, now))
        except TimingError:
            grace = MAX_GRACE  # no cadence around now (no slot left): its missed slots still count
    plan = Plan()
    on_time_from = saturating_add(now, -grace)
    if catchup == "all":
        # However the slots came to be missed, only the newest max_catchup are caught up.
        slots, plan.missed = _newest(timing, next_run_at, now, max_catchup, limit)
        for s in slots:
            _keep(plan, s, now, max_lateness)
        plan.next_run_at = _next_slot(timing, slots[-1] if slots else now)
        return plan

    # On time: within the grace period, and (a long grace) among the newest max_catchup slots.
    on_time, dropped = _newest(timing, max(next_run_at, on_time_from), now, max_catchup, limit)
    missed = 0
    if next_run_at < on_time_from:
        missed = len(slots_between(timing, next_run_at, on_time_from - _MICROSECOND, DROPPED_COUNT_LIMIT))
    if catchup == "latest" and missed and not on_time:
        newest = latest_slot_at_or_before(timing, on_time_from - _MICROSECOND)
        if newest is not None and newest >= next_run_at:
            _keep(plan, newest, now, max_lateness)
            missed -= 1
    plan.missed = missed + dropped
    for s in on_time:
        _keep(plan, s, now, max_lateness)
    last = on_time[-1] if len(on_time) == limit else now
    plan.next_run_at = _next_slot(timing, last)
    return plan


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
    if max_lateness is not None and now - slot > max_lateness:
        plan.skipped.append((slot, f"max_lateness: {now - slot} late (limit {max_lateness})"))
    else:
        plan.run.append(slot)
