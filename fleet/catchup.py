"""Which of a schedule's due slots to create, run or record as skipped: the catch-up policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fleet.schedfile import CatchUp, default_grace
from fleet.schedule import (
    Timing,
    first_slot_at_or_after,
    latest_slot_at_or_before,
    next_slot,
    nominal_interval,
    slots_and_next,
    slots_between,
)

# Counting dropped slots is only for the operator's information; past this it stops counting.
_COUNT_LIMIT = 10_000


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
    `all` keeps them all, or with `max_catchup` the newest that many (about: counted in intervals
    back from the grace period), the older ones counted missed without a row. Any slot kept but older
    than `max_lateness` is recorded as skipped. Then, once every slot up to `now` is planned, the
    slots in (now, now + lookahead] are kept too, to be created ahead of their time. At most `limit`
    slots are handled; when more remain, next_run_at stays within the horizon so the next tick goes on.
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
        ahead, after = slots_and_next(timing, nxt, now + lookahead, room)
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
        grace = default_grace(nominal_interval(timing, now))
    plan = Plan()
    if catchup == "all":
        if max_catchup is not None:
            horizon = now - grace - nominal_interval(timing, now) * max_catchup
            if next_run_at < horizon:
                # However the slots came to be missed, only the newest max_catchup are caught up.
                before = horizon - timedelta(microseconds=1)
                plan.missed = len(slots_between(timing, next_run_at, before, _COUNT_LIMIT))
                start = first_slot_at_or_after(timing, horizon)
                if start is None:
                    return Plan(missed=plan.missed, next_run_at=None)
                next_run_at = start
        slots = slots_between(timing, next_run_at, now, limit)
        for s in slots:
            _keep(plan, s, now, max_lateness)
        plan.next_run_at = next_slot(timing, slots[-1]) if slots else next_slot(timing, now)
        return plan

    on_time_from = now - grace
    on_time = slots_between(timing, max(next_run_at, on_time_from), now, limit)
    missed_end = on_time[0] if on_time else now
    missed = [s for s in slots_between(timing, next_run_at, missed_end, _COUNT_LIMIT) if s < on_time_from]
    if catchup == "latest" and missed and not on_time:
        newest = latest_slot_at_or_before(timing, on_time_from) or missed[-1]
        _keep(plan, newest, now, max_lateness)
        plan.missed = len(missed) - 1
    else:
        plan.missed = len(missed)
    for s in on_time:
        _keep(plan, s, now, max_lateness)
    last = on_time[-1] if len(on_time) == limit else now
    plan.next_run_at = next_slot(timing, last)
    return plan


def _keep(plan: Plan, slot: datetime, now: datetime, max_lateness: timedelta | None) -> None:
    if max_lateness is not None and now - slot > max_lateness:
        plan.skipped.append((slot, f"max_lateness: {now - slot} late (limit {max_lateness})"))
    else:
        plan.run.append(slot)
