"""What to tell, and whom: the problems the health read finds, set against what each route has told.

Pure: `conditions` turns one health read into the problems that hold, per subject (a schedule, or
`FLEET` for the fleet's own verdicts); `plan` compares them with the open alert state and returns
the notices to send and the state to keep. Per route, subject and verdict:

    problem starts                   an `alert`, the problem is open
    still open, `repeat` has passed  a `repeat` (none without `repeat`)
    problem ends                     a `recovery` (when the route tells recoveries), the problem closed
    route no longer covers it        closed without a word (the route's schedules or verdicts changed)

The fleet's own verdicts (NO-TICKER, TICKER-CRASHING) hold for every schedule that expects slots;
a route tells of them once, as the fleet's, when they hold for at least one schedule it covers.
What they make of each schedule (`CONSEQUENCES`: no slot, so LATE and OVERDUE) is theirs, not the
schedule's, and is held back per route, subject and verdict (a row with no notice):

    a consequence starts while a fleet verdict holds    held, untold; each read under it noted
    a problem told before a fleet verdict holds         kept open, not repeated meanwhile
    the fleet verdict ends, the consequence still holds told once it outlasts `settle_s`
    a held consequence ends                             closed without a word

A route that tells a consequence but not the fleet verdict hears of the fleet verdict in its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from fleet.admin.alert_routes import AlertRoute
from fleet.health.results import ScheduleHealth
from fleet.health.verdicts import FLEET_VERDICTS, LATE_AFTER_INTERVALS, FleetHealth, retrying_text

# The subject of the fleet's own verdicts (a schedule's name is never empty).
FLEET: Final = ""
# What a fleet verdict makes of every schedule it holds for: no slot is created, so none succeeds
# (LATE) and none is done by its deadline (OVERDUE). Telling them per schedule would turn one missing
# ticker into a notice for every schedule.
CONSEQUENCES: Final[tuple[str, ...]] = ("OVERDUE", "LATE")
Event = Literal["alert", "repeat", "recovery"]
Key = tuple[str, str, str]  # route, subject, verdict


@dataclass(frozen=True)
class Problem:
    """A verdict that holds for a subject, with the line that says why."""

    verdict: str
    detail: str


@dataclass(frozen=True)
class Subject:
    """What holds for one schedule (or the fleet) in a health read."""

    name: str
    problems: dict[str, Problem]
    verdict: str  # the schedule's verdict now (for the fleet: its first problem, else OK)
    # for the fleet: the schedules each of its verdicts holds for (those that expect slots)
    holds_for: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # for a schedule: the fleet verdicts that hold for it (its CONSEQUENCES are theirs meanwhile),
    # and how long each consequence may outlast them and still be theirs (see `settle_s`)
    caused_by: tuple[str, ...] = ()
    settle: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class OpenProblem:
    """A row of `fleet.alert_state`: a problem a route has told of and not seen end, or, `held`, a
    consequence of a fleet verdict kept untold (its `last_sent_at` is the last read under it)."""

    route: str
    subject: str
    verdict: str
    opened_at: datetime
    last_sent_at: datetime
    notices: int = 1

    @property
    def held(self) -> bool:
        return self.notices == 0


@dataclass(frozen=True)
class Notice:
    """One notice to send: a row of `fleet.alert_outbox`."""

    route: str
    subject: str
    verdict: str
    event: Event
    payload: dict[str, Any]


@dataclass
class Plan:
    notices: list[Notice] = field(default_factory=list)
    opened: list[Key] = field(default_factory=list)
    repeated: list[Key] = field(default_factory=list)
    closed: list[Key] = field(default_factory=list)  # the problem ended (a recovery may be among notices)
    dropped: list[Key] = field(default_factory=list)  # no longer the route's to tell
    held: list[Key] = field(default_factory=list)  # a consequence of a fleet verdict, read under it


def span(seconds: float | None) -> str:
    """A duration for people: ``42s``, ``3m05s``, ``2h10m``, ``3d04h``."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def detail(h: ScheduleHealth, verdict: str) -> str:
    """One line saying why `verdict` holds for the schedule, from its health numbers."""
    if verdict == "BROKEN":
        return f"its timing cannot be evaluated: {h.broken_error or 'unknown error'}"
    if verdict == "DEAD":
        runs = "run waits" if h.dead_runs == 1 else "runs wait"
        last = f"; last error: {h.last_error}" if h.last_error else ""
        return f"{h.dead_runs} dead {runs} for an operator's retry or discard{last}"
    if verdict == "NO-WORKER":
        return f"no live worker runs job {h.job} ({h.unserved_runs} open runs wait)"
    if verdict == "OVERDUE":
        deadline = h.deadline_s or 0.0
        due = h.overdue_slot + timedelta(seconds=deadline) if h.overdue_slot else None
        return f"the run of slot {iso(h.overdue_slot)} was not done by its deadline {iso(due)}"
    if verdict == "BACKLOG":
        return f"the oldest due run has waited {span(h.oldest_pending_age_s)} for a worker"
    if verdict == "LATE":
        every = f" (every {span(h.interval_s)})" if h.interval_s else ""
        return f"no success for {span(h.quiet_s)}{every}"
    if verdict == "RETRYING":
        return retrying_text(iso(h.retry_slot) or "a run", iso(h.retry_at), h.overlap, h.paused)
    if verdict == "PAUSED":
        return "paused by an operator" + (f": {h.pause_note}" if h.pause_note else "")
    if verdict == "DISABLED":
        return "no longer in the schedules file"
    return verdict


def fleet_detail(fleet: FleetHealth, verdict: str) -> str:
    """One line saying why a fleet verdict holds."""
    if verdict == "NO-TICKER":
        last = fleet.last_ticker
        if last is None:
            return "no ticker is running: no slot is created"
        return (
            f"no ticker seen for {span(last.seen_s_ago)} (last: {last.id} on {last.host}): no slot is created"
        )
    crash = fleet.last_crash
    if crash is None:
        return "a ticker recorded an unexpected error"
    return f"ticker {crash.id} on {crash.host} recorded an unexpected error: {crash.error or 'unknown'}"


def conditions(fleet: FleetHealth, healths: Iterable[ScheduleHealth]) -> dict[str, Subject]:
    """The problems of one health read, by subject (the fleet's under `FLEET`)."""
    found: dict[str, Subject] = {}
    fleet_for: dict[str, list[str]] = {}
    for h in healths:
        mine: dict[str, Problem] = {}
        for v in h.problems:
            if v in FLEET_VERDICTS:
                fleet_for.setdefault(v, []).append(h.name)
            else:
                mine[v] = Problem(v, detail(h, v))
        caused_by = tuple(v for v in h.problems if v in FLEET_VERDICTS)
        settle = {v: settle_s(h, v) for v in CONSEQUENCES if v in mine}
        found[h.name] = Subject(h.name, mine, h.verdict, caused_by=caused_by, settle=settle)
    problems: dict[str, Problem] = {
        v: Problem(v, fleet_detail(fleet, v)) for v in FLEET_VERDICTS if v in fleet_for
    }
    found[FLEET] = Subject(
        FLEET, problems, next(iter(problems), "OK"), {v: tuple(names) for v, names in fleet_for.items()}
    )
    return found


def settle_s(h: ScheduleHealth, verdict: str) -> float:
    """How long after the fleet verdicts end a consequence of theirs may still hold and be theirs:
    LATE two intervals (as after a resume, a schedule is not late before it could have succeeded),
    OVERDUE one interval and the deadline (until the first slot after them is past its deadline)."""
    interval = h.interval_s or 0.0
    if verdict == "OVERDUE":
        return interval + (h.deadline_s or 0.0)
    return LATE_AFTER_INTERVALS * interval


def _tells_fleet(route: AlertRoute, verdict: str) -> bool:
    """Whether the route may tell of a fleet verdict: it tells that verdict, or a consequence of it."""
    return route.tells(verdict) or any(route.tells(c) for c in CONSEQUENCES)


def _fleet_holds(subjects: Mapping[str, Subject], route: AlertRoute, verdict: str) -> list[str]:
    """The schedules the route covers for which the fleet verdict holds."""
    fleet = subjects.get(FLEET)
    return [n for n in fleet.holds_for.get(verdict, ()) if route.covers(n)] if fleet else []


def _stands_in(subjects: Mapping[str, Subject], route: AlertRoute, names: Sequence[str]) -> bool:
    """Whether a consequence the route tells holds for one of the schedules."""
    told = [c for c in CONSEQUENCES if route.tells(c)]
    return any(c in subjects[n].problems for n in names for c in told)


def plan(
    routes: Sequence[AlertRoute],
    subjects: Mapping[str, Subject],
    open_problems: Sequence[OpenProblem],
    now: datetime,
) -> Plan:
    """The notices to send at `now` and how the open problems change (see the module's docstring)."""
    out = Plan()
    by_key = {(p.route, p.subject, p.verdict): p for p in open_problems}
    by_name = {r.name: r for r in routes}
    troubled = [(name, s) for name, s in subjects.items() if s.problems and name != FLEET]
    for route in routes:
        holding: dict[Key, Problem] = {}
        for name, subject in troubled:
            if not route.covers(name):
                continue
            for v, problem in subject.problems.items():
                if route.tells(v):
                    holding[(route.name, name, v)] = problem
        for v in FLEET_VERDICTS:
            names, fleet_key = _fleet_holds(subjects, route, v), (route.name, FLEET, v)
            # a route that does not tell it hears of it in place of the consequences it tells
            if names and (route.tells(v) or fleet_key in by_key or _stands_in(subjects, route, names)):
                holding[fleet_key] = subjects[FLEET].problems[v]
        for key, problem in holding.items():
            old = by_key.get(key)
            _, name, verdict = key
            subject = subjects[name]
            if verdict in CONSEQUENCES:
                if subject.caused_by:
                    if old is None or old.held:
                        out.held.append(key)
                    continue  # the fleet's doing; one told before it is not repeated meanwhile
                if old is not None and old.held:
                    if (now - old.last_sent_at).total_seconds() < subject.settle.get(verdict, 0.0):
                        continue
                    old = None  # it outlasted the fleet verdicts: the schedule's own, told now
            if old is None:
                out.opened.append(key)
                out.notices.append(_notice(route, key, "alert", problem, subjects, now, now, 1))
            elif route.repeat is not None and now - old.last_sent_at >= route.repeat:
                out.repeated.append(key)
                out.notices.append(
                    _notice(route, key, "repeat", problem, subjects, old.opened_at, now, old.notices + 1)
                )
    for key, old in by_key.items():
        route_name, who, verdict = key
        told = by_name.get(route_name)
        if told is None:
            continue  # its rows go with the route
        covered = (
            verdict in FLEET_VERDICTS and _tells_fleet(told, verdict)
            if who == FLEET
            else told.tells(verdict) and told.covers(who)
        )
        if not covered:
            out.dropped.append(key)
            continue
        now_holds = (
            bool(_fleet_holds(subjects, told, verdict))
            if who == FLEET
            else who in subjects and verdict in subjects[who].problems
        )
        if now_holds:
            continue
        out.closed.append(key)
        if told.recovery and not old.held:  # a held consequence was never told: nor is its end
            out.notices.append(_recovery(told, key, old, subjects, now))
    return out


def _summary(subject: str, verdict: str, text: str) -> str:
    who = "fleet" if subject == FLEET else subject
    return f"{verdict}: {who}: {text}"


def _notice(
    route: AlertRoute,
    key: Key,
    event: Event,
    problem: Problem,
    subjects: Mapping[str, Subject],
    opened_at: datetime,
    now: datetime,
    number: int,
) -> Notice:
    _, subject, verdict = key
    s = subjects.get(subject)
    text = problem.detail
    if event == "repeat":
        text = f"{text} (still, for {span((now - opened_at).total_seconds())})"
    payload: dict[str, Any] = {
        "event": event,
        "route": route.name,
        "schedule": None if subject == FLEET else subject,
        "verdict": verdict,
        "detail": problem.detail,
        "summary": _summary(subject, verdict, text),
        "verdict_now": s.verdict if s is not None else None,
        "problems": list(s.problems) if s is not None and subject != FLEET else [verdict],
        "opened_at": iso(opened_at),
        "at": iso(now),
        "notice": number,
    }
    if subject == FLEET:
        payload["schedules"] = _fleet_holds(subjects, route, verdict)
    return Notice(route.name, subject, verdict, event, payload)


def _recovery(
    route: AlertRoute, key: Key, old: OpenProblem, subjects: Mapping[str, Subject], now: datetime
) -> Notice:
    _, subject, verdict = key
    s = subjects.get(subject)
    if subject == FLEET:
        verdict_now: str | None = "OK"
        still = "ended"
    elif s is None:
        verdict_now, still = None, "ended: the schedule is gone"
    else:
        verdict_now = s.verdict
        still = "ended" + (f"; now {s.verdict}" if s.verdict != "OK" else "")
    lasted = span((now - old.opened_at).total_seconds())
    text = f"{still} (after {lasted})"
    payload: dict[str, Any] = {
        "event": "recovery",
        "route": route.name,
        "schedule": None if subject == FLEET else subject,
        "verdict": verdict,
        "detail": text,
        "summary": f"RESOLVED {_summary(subject, verdict, text)}",
        "verdict_now": verdict_now,
        "problems": list(s.problems) if s is not None and subject != FLEET else [],
        "opened_at": iso(old.opened_at),
        "at": iso(now),
        "notice": old.notices + 1,
    }
    return Notice(route.name, subject, verdict, "recovery", payload)
