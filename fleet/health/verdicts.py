"""A schedule's health verdict from its numbers: pure, with every instant already turned into seconds.

The three numbers an operator alerts on are the time since the last success (measured against the
schedule's own cadence), the dead runs waiting for an operator, and the age of the oldest due
pending run. From them, from the schedule's state and from the fleet's tickers comes one verdict:

    BROKEN           the schedule's timing cannot be evaluated (the ticker marked it, with its
                     error, and skips it until it is changed or evaluates again)
    DEAD             dead runs > 0, until an operator retries or discards them (a later success
                     does not hide them)
    NO-TICKER        no live ticker: no ticker seen within the staleness limit (60 s), so no slot
                     is created (fleet-wide: every enabled, unpaused schedule has it)
    TICKER-CRASHING  a ticker recorded an unexpected error within the last few minutes (likewise
                     fleet-wide)
    NO-WORKER        open runs whose job no live worker has registered
    OVERDUE          the schedule has a `deadline`, and the newest of its slots whose deadline
                     (slot + deadline) has passed has no successful run: missing, waiting, running,
                     dead or skipped. A promise of the schedule's own, whatever its cadence
    BACKLOG          the oldest due pending run has waited longer than one interval
    LATE             no success for more than two intervals
    RETRYING         a run waits out a retry back-off after a failed attempt; under overlap
                     `skip` (the default) the schedule's later slots are skipped meanwhile, under
                     `queue` they wait for it
    PAUSED           paused by an operator (`fleetctl pause`): expected to be quiet, so not LATE
    DISABLED         no longer in the schedules file (`fleetctl apply --prune`): likewise
    ENDED            its calendar's `until` is past: it has no slot left, as its definition says
    OK               none of the above

When several hold, the verdict is the first in that order (the most actionable: BROKEN needs its
definition fixed, DEAD an operator, NO-TICKER a ticker started, NO-WORKER names the cause of a
backlog, OVERDUE the slot that broke the schedule's promise, a backlog the cause of lateness);
`problems` lists them all. RETRYING is the retry policy at work and counts as healthy; when the
retries keep a schedule quiet for long, it is LATE, with RETRYING among its problems to say why.
PAUSED and DISABLED are an operator's decision and count as healthy, and so does ENDED. The
fleet-wide verdicts concern only schedules that expect slots: a paused, disabled or ended schedule
does not get them, and a fleet without such schedules has no ticker to miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

Verdict = Literal[
    "OK",
    "LATE",
    "DEAD",
    "BACKLOG",
    "PAUSED",
    "DISABLED",
    "NO-WORKER",
    "BROKEN",
    "NO-TICKER",
    "TICKER-CRASHING",
    "RETRYING",
    "OVERDUE",
    "ENDED",
]

SEVERITY: Final[tuple[Verdict, ...]] = (
    "BROKEN",
    "DEAD",
    "NO-TICKER",
    "TICKER-CRASHING",
    "NO-WORKER",
    "OVERDUE",
    "BACKLOG",
    "LATE",
    "RETRYING",
    "PAUSED",
    "DISABLED",
    "ENDED",
    "OK",
)
UNHEALTHY: Final[frozenset[Verdict]] = frozenset(
    {"BROKEN", "DEAD", "NO-TICKER", "TICKER-CRASHING", "NO-WORKER", "OVERDUE", "BACKLOG", "LATE"}
)
# The verdicts of the fleet's tickers rather than of one schedule (see `FleetHealth`).
FLEET_VERDICTS: Final[tuple[Verdict, ...]] = ("NO-TICKER", "TICKER-CRASHING")

# No success for more than this many intervals is LATE; a due run waiting longer than this many
# intervals is a BACKLOG.
LATE_AFTER_INTERVALS: Final = 2.0
BACKLOG_AFTER_INTERVALS: Final = 1.0

# The health roll-up (fleet.health.rollup) has merged the runs that finished before its mark less this
# margin, and a read (fleet.health.reading) adds those finished since then itself: a run's `finished_at` is
# its transaction's start, and the transaction may commit up to this much later.
ROLLUP_MARGIN_S: Final = 30.0


@dataclass(frozen=True)
class Health:
    """One schedule's health numbers, in seconds."""

    # The schedule's own cadence near now (for cron, the real gap between its slots around now);
    # None when it cannot be told, which turns off LATE and BACKLOG.
    interval_s: float | None
    # Since the last success, or since the schedule was created, changed, resumed or first due,
    # whichever is latest: a schedule is not late before it could have succeeded.
    quiet_s: float
    dead_runs: int
    # Age of the oldest pending run that is due (measured from when it became due); None if none.
    oldest_pending_age_s: float | None
    # Open runs whose job no live worker serves.
    unserved_runs: int
    paused: bool = False
    enabled: bool = True
    # The ticker could not evaluate the schedule's timing (`broken_at` is set).
    broken: bool = False
    # The fleet's own verdicts (`FleetHealth.problems`), which hold for the schedule unless it is
    # paused or disabled.
    fleet: tuple[Verdict, ...] = ()
    # Runs waiting out a retry back-off after a failed attempt.
    retrying_runs: int = 0
    # The newest slot past its deadline has no successful run.
    overdue: bool = False
    # The calendar's `until` is past.
    ended: bool = False


@dataclass(frozen=True)
class TickerSeen:
    """A ticker's registry row, as the fleet-wide verdicts tell of it."""

    id: str
    host: str
    seen_at: datetime
    seen_s_ago: float


@dataclass(frozen=True)
class TickerCrash:
    """The newest crash a ticker recorded, within `CRASH_RECENT_S` of the read."""

    id: str
    host: str
    crashed_at: datetime
    crashed_s_ago: float
    # crashes recorded under that id, across its restarts
    crashes: int
    error: str | None


@dataclass(frozen=True)
class FleetHealth:
    """What the fleet's tickers are doing, for the fleet-wide verdicts."""

    # Tickers seen within the staleness limit.
    live_tickers: int
    # The ticker seen last, live or not; None when no ticker row is left.
    last_ticker: TickerSeen | None = None
    # Tickers that recorded a crash recently, and the newest of those crashes.
    crashed_tickers: int = 0
    last_crash: TickerCrash | None = None
    # Crashes recorded on the tickers' rows, recent or not.
    crashes: int = 0

    @property
    def problems(self) -> tuple[Verdict, ...]:
        """NO-TICKER and TICKER-CRASHING when they hold, in that order."""
        found: list[Verdict] = []
        if self.live_tickers == 0:
            found.append("NO-TICKER")
        if self.crashed_tickers > 0:
            found.append("TICKER-CRASHING")
        return tuple(found)


def problems(h: Health) -> list[Verdict]:
    """Every condition that holds, most severe first; empty when the schedule is simply OK."""
    return list(
        problems_of(
            h.interval_s,
            h.quiet_s,
            h.dead_runs,
            h.oldest_pending_age_s,
            h.unserved_runs,
            h.paused,
            h.enabled,
            h.broken,
            h.fleet,
            h.retrying_runs,
            h.overdue,
            h.ended,
        )
    )


def problems_of(
    interval_s: float | None,
    quiet_s: float,
    dead_runs: int,
    oldest_pending_age_s: float | None,
    unserved_runs: int,
    paused: bool,
    enabled: bool,
    broken: bool = False,
    fleet: tuple[Verdict, ...] = (),
    retrying_runs: int = 0,
    overdue: bool = False,
    ended: bool = False,
) -> tuple[Verdict, ...]:
    """`problems` of the numbers given one by one, as a tuple (for reads of many schedules)."""
    if (
        not dead_runs
        and not overdue
        and not broken
        and not fleet
        and not unserved_runs
        and not retrying_runs
        and not paused
        and enabled
        and not ended
        and (interval_s is None or quiet_s <= LATE_AFTER_INTERVALS * interval_s)
        and (
            interval_s is None
            or oldest_pending_age_s is None
            or oldest_pending_age_s <= BACKLOG_AFTER_INTERVALS * interval_s
        )
    ):
        return ()
    found: list[Verdict] = []
    if broken:
        found.append("BROKEN")
    if dead_runs > 0:
        found.append("DEAD")
    if fleet and enabled and not paused and not ended:
        found.extend(fleet)
    if unserved_runs > 0:
        found.append("NO-WORKER")
    if overdue:
        found.append("OVERDUE")
    if (
        interval_s is not None
        and oldest_pending_age_s is not None
        and oldest_pending_age_s > BACKLOG_AFTER_INTERVALS * interval_s
    ):
        found.append("BACKLOG")
    quiet_expected = paused or not enabled or ended
    if not quiet_expected and interval_s is not None and quiet_s > LATE_AFTER_INTERVALS * interval_s:
        found.append("LATE")
    if retrying_runs > 0:
        found.append("RETRYING")
    if paused:
        found.append("PAUSED")
    if not enabled:
        found.append("DISABLED")
    if ended:
        found.append("ENDED")
    return tuple(found)


def verdict(h: Health) -> Verdict:
    """The single verdict: the most severe condition that holds, else OK."""
    found = problems(h)
    return found[0] if found else "OK"


def verdict_text(v: Verdict, job: str, job_served: bool) -> str:
    """The verdict as `fleetctl status` prints it: NO-WORKER names the job no live worker serves
    (`NO-WORKER (job reports.nightly)`), when that is the schedule's own job."""
    return f"{v} (job {job})" if v == "NO-WORKER" and not job_served else v


def retrying_text(slot: str, retry_at: str | None, overlap: str, paused: bool = False) -> str:
    """Why a RETRYING schedule is quiet, given the slot waiting to retry and its next try (ISO-8601):
    ``2026-11-02T10:00:00Z waits to retry at 2026-11-02T10:00:41Z; later slots are skipped until it
    ends (overlap skip)``. A paused schedule's retry waits for the resume."""
    if paused:
        return f"{slot} waits to retry until the schedule is resumed"
    text = f"{slot} waits to retry" + (f" at {retry_at}" if retry_at else "")
    if overlap == "skip":
        return f"{text}; later slots are skipped until it ends (overlap skip)"
    if overlap == "queue":
        return f"{text}; later slots wait for it (overlap queue)"
    return text


def is_healthy(v: Verdict) -> bool:
    """True for OK, RETRYING, PAUSED, DISABLED and ENDED: nothing for an operator to do."""
    return v not in UNHEALTHY
