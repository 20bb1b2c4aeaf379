"""The slot ledger: what became of each slot a schedule's timing yields in a window.

Pure: the slots and the runs come in as sorted chunks of integers (instants as microseconds since
2000-01-01 UTC, PostgreSQL's own epoch, which is how the database sends them) and are merged; the
facts that explain a slot without a run (a pause, a broken mark, the catch-up counter, retention)
come in as a :class:`Facts`. `fleet.health.verify` reads them from the database; `fleetctl verify` and
`fleet.Client.verify` print and return the records defined here.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, get_args

from fleet.timing.schedule import DROPPED_COUNT_LIMIT

# What became of a slot. A slot has one outcome; `missed` slots have a reason (`MissReason`) and
# `skipped` ones a policy (`SkipPolicy`); `unexplained` is a missed slot without either.
Outcome = Literal[
    "once",
    "retried",
    "reclaimed",
    "skipped",
    "dead",
    "pending",
    "running",
    "never_started",
    "unplanned",
    "pruned",
    "missed",
    "unexplained",
]
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)
SkipPolicy = Literal["catchup", "max_lateness", "overlap", "calendar", "discarded", "other"]
SKIP_POLICIES: Final[tuple[SkipPolicy, ...]] = get_args(SkipPolicy)
MissReason = Literal["paused", "broken", "disabled", "before_created", "timing_changed", "catchup"]
MISS_REASONS: Final[tuple[MissReason, ...]] = get_args(MissReason)
# A range of the ledger that is not a slot: a run at an instant the timing does not yield.
NOT_A_SLOT: Final = "not_a_slot"

PG_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
FAR: Final = 2**63  # beyond any instant: a fact that does not hold

# A run's code, as the database packs it (fleet/sql/ledger.sql, run_ledger): attempts << 8 | kind,
# plus OPERATOR when an operator created it (trigger, backfill).
DONE, RECLAIMED, DEAD, PENDING, RUNNING = 1, 2, 3, 4, 5
_SKIPPED_KINDS: Final[dict[int, SkipPolicy]] = {
    6: "catchup",
    7: "max_lateness",
    8: "overlap",
    9: "discarded",
    10: "other",
}
OPERATOR: Final = 16
ONCE_CODE: Final = (1 << 8) | DONE
# Runs compared at once when they line up with the slots: one comparison of arrays instead of a
# step per slot; after a block that does not line up, this many slots are taken one at a time.
BLOCK: Final = 1024

_SKIP_TEXT: Final[dict[SkipPolicy, str]] = {
    "catchup": "skipped by the catch-up policy",
    "max_lateness": "skipped: later than max_lateness",
    "overlap": "skipped: an earlier run was still in progress (overlap)",
    "calendar": "skipped: a date the schedule's calendar excludes",
    "discarded": "dead, then discarded by an operator",
    "other": "skipped",
}
NO_RECORD: Final = "no run and no record"


def micros(at: datetime) -> int:
    """`at` as microseconds since 2000-01-01 UTC."""
    return (at - PG_EPOCH) // _MICROSECOND


def instant(us: int) -> datetime:
    """The instant `us` microseconds after 2000-01-01 UTC."""
    return PG_EPOCH + timedelta(microseconds=us)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Facts:
    """What is known of a schedule, besides its runs, as instants in microseconds (`FAR` when a
    fact does not hold, `-FAR` for no retention cutoff) and the texts that say it."""

    now: int
    #: slots before this: the schedule did not exist yet
    created: int
    #: slots from this on are not planned because the schedule is paused / broken / disabled
    paused: int = FAR
    #: the pauses that ended, as the audit recorded them: [start, end) and the text that says it,
    #: in order and apart
    pauses: tuple[tuple[int, int, str], ...] = ()
    broken: int = FAR
    disabled: int = FAR
    #: the ticker's next slot to plan: later slots are not created yet
    planned_until: int = FAR
    #: slots before this are older than the retention: their runs may have been removed
    cutoff: int = -FAR
    #: a pending run never started when its slot is older than this
    grace: int = 60_000_000
    #: slots the catch-up policy dropped in the schedule's life (schedules.missed_slots)
    missed_slots: int = 0
    catchup: str = "latest"
    paused_text: str = "paused"
    broken_text: str = "broken"
    created_text: str = "before the schedule existed"
    planned_text: str = "not created yet"
    cutoff_text: str = "older than the retention"
    #: whether the schedule's calendar excludes a slot (None: it has no calendar): a slot skipped
    #: for no policy the database names (its reason starts `calendar:`) on an excluded date was
    #: skipped by the calendar
    excluded: Callable[[int], bool] | None = None


@dataclass(frozen=True)
class SlotRange:
    """Consecutive slots with the same outcome and reason (or runs that are not slots)."""

    #: What became of them (`not_a_slot` for runs at instants the timing does not yield).
    outcome: str
    #: Why, in words: the policy that skipped them, the reason they were missed, the attempts.
    reason: str
    #: The first and the last slot of the range, in UTC.
    first: datetime
    last: datetime
    #: How many slots (or runs) it holds.
    slots: int

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "from": _iso(self.first),
            "to": _iso(self.last),
            "slots": self.slots,
        }


@dataclass(frozen=True)
class ScheduleLedger:
    """One schedule's slots in the window, reconciled with its runs."""

    #: The schedule's name.
    name: str
    #: Its timing in words (``every 1m``, ``cron 0 2 * * * (Europe/Berlin)``).
    timing: str
    #: The window examined: from the later of the window's start and the schedule's start
    #: (`start_at`, else its creation), to the window's end.
    start: datetime
    end: datetime
    #: Slots the timing yields in it.
    slots: int
    #: Slots per outcome (every outcome present, 0 when none).
    counts: dict[str, int]
    #: Skipped slots per policy (catchup, max_lateness, overlap, discarded, other).
    skipped: dict[str, int]
    #: Missed slots with a reason, per reason.
    missed: dict[str, int]
    #: Runs of the schedule in the window at instants its timing does not yield (made under
    #: another timing): reported, never a failure.
    not_a_slot: int
    #: Slots with more than one run (the primary key forbids it: always 0 unless it is broken).
    created_twice: int
    #: Slots whose run an operator created (backfill or trigger).
    by_operator: int
    #: The ranges of slots that did not simply run once, unexplained ones first when cut.
    entries: tuple[SlotRange, ...]
    #: Ranges left out of `entries` by the limit.
    entries_left_off: int
    #: Why the slots could not be enumerated (a timing that cannot be evaluated), else None.
    error: str | None = None
    #: The end of the schedule's calendar (`until`) when it falls before the window's end: the
    #: window is cut there (no slot after it is a slot), else None.
    ended_at: datetime | None = None

    @property
    def ok(self) -> bool:
        """True when every slot is accounted for: none is missing without a recorded reason."""
        return self.error is None and self.counts["unexplained"] == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "timing": self.timing,
            "from": _iso(self.start),
            "until": _iso(self.end),
            "ok": self.ok,
            "slots": self.slots,
            "counts": self.counts,
            "skipped": self.skipped,
            "missed": self.missed,
            "not_a_slot": self.not_a_slot,
            "created_twice": self.created_twice,
            "by_operator": self.by_operator,
            "entries": [e.to_json() for e in self.entries],
            "entries_left_off": self.entries_left_off,
            "error": self.error,
            "ended_at": _iso(self.ended_at) if self.ended_at is not None else None,
        }


@dataclass(frozen=True)
class Verification:
    """The ledger of every schedule verified, over one window."""

    #: The window asked for (its end is never later than `now`).
    since: datetime
    until: datetime
    #: The database's time of the read.
    now: datetime
    schedules: tuple[ScheduleLedger, ...]

    @property
    def ok(self) -> bool:
        """True when no schedule has a slot missing without a recorded reason."""
        return all(s.ok for s in self.schedules)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": _iso(self.since),
            "until": _iso(self.until),
            "now": _iso(self.now),
            "ok": self.ok,
            "schedules": [s.to_json() for s in self.schedules],
        }


# ---------------------------------------------------------------------------------------------------
# The merge


# A slot's classification: (outcome, detail, reason text). The detail is the policy of a skipped
# slot or the reason of a missed one; equal keys of consecutive slots make one range.
Key = tuple[str, str, str]
_ONCE: Final[Key] = ("once", "", "")
_CANDIDATE: Final[Key] = ("candidate", "", "")
_FOREIGN: Final[Key] = (NOT_A_SLOT, "", "not a slot of the timing")
_EMPTY: Final = array("q")


@dataclass
class _Range:
    key: Key
    first: int
    last: int
    slots: int
    # for slots without a run: whether the schedule's runs just before and just after them are at
    # instants the timing does not yield (or there is none before them in the window)
    foreign_before: bool = False
    foreign_after: bool = False


@dataclass
class Ledger:
    """Merges one schedule's slots with its runs; `result()` gives its ScheduleLedger.

    Feed it with :meth:`merge` once. `limit` bounds the ranges kept for the listing (every slot is
    counted whatever the limit); slots that may have been dropped by the catch-up are kept whole,
    since whether they were is only known once every one of them is.
    """

    facts: Facts
    limit: int
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_POLICIES, 0))
    missed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MISS_REASONS, 0))
    slots: int = 0
    not_a_slot: int = 0
    created_twice: int = 0
    by_operator: int = 0
    _ranges: list[_Range] = field(default_factory=list)
    _kept: int = 0  # ranges kept, candidates aside
    _left_off: int = 0
    _previous: Key | None = None
    _open: _Range | None = None
    _last_run: int = -FAR
    _foreign_last: bool = True  # whether the schedule's last run seen was not at a slot (or none was)
    _gaps: list[_Range] = field(default_factory=list)  # candidates since that run
    _keys: dict[tuple[Any, ...], Key] = field(default_factory=dict)
    _pause_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._pause_starts = [start for start, _, _ in self.facts.pauses]

    def merge(self, slots: Iterable[array[int]], runs: Iterable[tuple[array[int], array[int]]]) -> None:
        """Walk the slots (ascending chunks) and the runs (ascending chunks of slot instants, with
        their codes) side by side, once."""
        slot_chunks: Iterator[array[int]] = iter(slots)
        run_chunks = iter(runs)
        s_chunk = t_chunk = c_chunk = _EMPTY
        i = j = 0
        cooldown = 0
        while True:
            if i == len(s_chunk):
                more = next(slot_chunks, None)
                if more is None:
                    break
                s_chunk, i = more, 0
                self.slots += len(more)
                continue
            if j == len(t_chunk):
                chunk = next(run_chunks, None)
                if chunk is None:  # no run left: the remaining slots have none
                    for s in s_chunk[i:]:
                        self._missing(s)
                    for more in slot_chunks:
                        self.slots += len(more)
                        for s in more:
                            self._missing(s)
                    return
                (t_chunk, c_chunk), j = chunk, 0
                continue
            s, t = s_chunk[i], t_chunk[j]
            if s == t:
                if cooldown == 0:
                    m = min(BLOCK, len(s_chunk) - i, len(t_chunk) - j)
                    if c_chunk[j : j + m].count(ONCE_CODE) == m and s_chunk[i : i + m] == t_chunk[j : j + m]:
                        # every slot of the block ran once
                        self.counts["once"] += m
                        self._previous = _ONCE
                        self._last_run = t_chunk[j + m - 1]
                        self._seen_run(foreign=False)
                        i += m
                        j += m
                        continue
                    cooldown = BLOCK
                self._run(s, c_chunk[j])
                i += 1
                j += 1
                cooldown -= 1
            elif t < s:
                self._not_a_slot(t, c_chunk[j])
                j += 1
            else:
                self._missing(s)
                i += 1
                cooldown = max(0, cooldown - 1)
        # no slot left: the remaining runs are not at slots
        for t, c in zip(t_chunk[j:], c_chunk[j:], strict=True):
            self._not_a_slot(t, c)
        for t_chunk, c_chunk in run_chunks:
            for t, c in zip(t_chunk, c_chunk, strict=True):
                self._not_a_slot(t, c)

    # -- one slot or run at a time ----------------------------------------------------------------

    def _key(self, *parts: Any) -> Key:
        """The key of a classification, made once (ranges continue while keys are equal)."""
        key = self._keys.get(parts)
        if key is None:
            key = self._keys[parts] = _describe(parts, self.facts)
        return key

    def _add(self, key: Key, at: int) -> None:
        if key == self._previous:
            if self._open is not None:
                self._open.last = at
                self._open.slots += 1
            return
        self._previous = key
        if key is _CANDIDATE:
            self._open = _Range(key, at, at, 1, foreign_before=self._foreign_last)
            self._ranges.append(self._open)
            self._gaps.append(self._open)
        elif self._kept < self.limit:
            self._open = _Range(key, at, at, 1)
            self._ranges.append(self._open)
            self._kept += 1
        else:
            self._open = None
            self._left_off += 1

    def _run(self, slot: int, code: int) -> None:
        """The slot's run, of code `code`."""
        self._last_run = slot
        kind, attempts = code & 15, code >> 8
        if code & OPERATOR:
            self.by_operator += 1
        else:
            self._seen_run(foreign=False)
        if kind == DONE:
            if attempts <= 1:
                self.counts["once"] += 1
                self._previous = _ONCE
                return
            key = self._key("retried", attempts)
        elif kind == RECLAIMED:
            key = self._key("reclaimed", attempts)
        elif kind == DEAD:
            key = self._key("dead", attempts)
        elif kind == PENDING:
            if attempts == 0 and slot + self.facts.grace < self.facts.now:
                key = self._key("never_started")
            else:
                key = self._key("pending", attempts)
        elif kind == RUNNING:
            key = self._key("running", attempts)
        else:
            policy = _SKIPPED_KINDS.get(kind, "other")
            if policy == "other" and self.facts.excluded is not None and self.facts.excluded(slot):
                policy = "calendar"
            self.skipped[policy] += 1
            key = self._key("skipped", policy)
        self.counts[key[0]] += 1
        self._add(key, slot)

    def _not_a_slot(self, at: int, code: int) -> None:
        """A run at an instant that is not a slot: made under another timing, or by an operator."""
        if at == self._last_run:
            self.created_twice += 1
            return
        self._last_run = at
        if code & OPERATOR:
            return  # a triggered or backfilled run at its own instant: not the timing's business
        self.not_a_slot += 1
        self._seen_run(foreign=True)
        self._add(_FOREIGN, at)

    def _seen_run(self, *, foreign: bool) -> None:
        """A run of the schedule's own (not an operator's): what follows the slots without a run
        before it, and precedes the next ones."""
        if self._gaps:
            for r in self._gaps:
                r.foreign_after = foreign
            self._gaps.clear()
        self._foreign_last = foreign

    def _pause_at(self, slot: int) -> str | None:
        """The text of the ended pause that held `slot`, if one did."""
        pauses = self.facts.pauses
        i = bisect.bisect_right(self._pause_starts, slot) - 1
        return pauses[i][2] if i >= 0 and slot < pauses[i][1] else None

    def _missing(self, slot: int) -> None:
        """A slot without a run: why, where a fact says it (checked in this order)."""
        f = self.facts
        if slot < f.created:
            reason = "before_created"
        elif slot >= f.paused:
            reason = "paused"
        elif f.pauses and (pause := self._pause_at(slot)) is not None:
            self.counts["missed"] += 1
            self.missed["paused"] += 1
            self._add(self._key("missed", "paused", pause), slot)
            return
        elif slot >= f.broken:
            reason = "broken"
        elif slot >= f.disabled:
            reason = "disabled"
        elif slot >= f.planned_until:
            self.counts["unplanned"] += 1
            self._add(self._key("unplanned"), slot)
            return
        elif slot < f.cutoff:
            self.counts["pruned"] += 1
            self._add(self._key("pruned"), slot)
            return
        else:
            # dropped by the catch-up, made under an earlier timing, or lost: known at the end
            self._add(_CANDIDATE, slot)
            return
        self.counts["missed"] += 1
        self.missed[reason] += 1
        self._add(self._key("missed", reason), slot)

    # -- the result -------------------------------------------------------------------------------

    def _settle(self) -> None:
        """Decide the slots without a run that no fact explained.

        Between runs of the schedule at instants its timing does not yield (the window's start
        counts as one), they belong to an earlier timing. The others were planned past by the
        ticker (they are before its next slot): the catch-up policy dropped them if it counted that
        many (schedules.missed_slots; a single drop of over DROPPED_COUNT_LIMIT slots counts that
        many), else they are unexplained.
        """
        f = self.facts
        candidates = [r for r in self._ranges if r.key is _CANDIDATE]
        if not candidates:
            return
        later = []
        for r in candidates:
            if r.foreign_before and r.foreign_after:
                r.key = self._key("missed", "timing_changed")
                self.counts["missed"] += r.slots
                self.missed["timing_changed"] += r.slots
            else:
                later.append(r)
        if not later:
            return
        counted = sum(min(r.slots, DROPPED_COUNT_LIMIT) for r in later)
        if f.missed_slots > 0 and counted <= f.missed_slots:
            key = self._key("missed", "catchup")
            for r in later:
                r.key = key
                self.counts["missed"] += r.slots
                self.missed["catchup"] += r.slots
            return
        lost = sum(r.slots for r in later)
        key = self._key("unexplained", lost if f.missed_slots else 0)
        for r in later:
            r.key = key
            self.counts["unexplained"] += r.slots

    def result(self, name: str, timing: str, start: datetime, end: datetime) -> ScheduleLedger:
        """The ledger, once :meth:`merge` is done."""
        self._settle()
        ranges = [r for r in self._ranges if r.key[0] != "once"]
        lost = [r for r in ranges if r.key[0] == "unexplained"][: self.limit]
        room = self.limit - len(lost)
        others = [r for r in ranges if r.key[0] != "unexplained"][: max(0, room)]
        shown = sorted(lost + others, key=lambda r: r.first)
        return ScheduleLedger(
            name=name,
            timing=timing,
            start=start,
            end=end,
            slots=self.slots,
            counts=dict(self.counts),
            skipped=dict(self.skipped),
            missed=dict(self.missed),
            not_a_slot=self.not_a_slot,
            created_twice=self.created_twice,
            by_operator=self.by_operator,
            entries=tuple(
                SlotRange(r.key[0], r.key[2], instant(r.first), instant(r.last), r.slots) for r in shown
            ),
            entries_left_off=len(ranges) - len(shown) + self._left_off,
        )


def _describe(parts: tuple[Any, ...], f: Facts) -> Key:
    """The key of a classification: its outcome, detail and reason text."""
    outcome = parts[0]
    if outcome == "retried":
        return ("retried", "", f"done after {parts[1]} attempts")
    if outcome == "reclaimed":
        return ("reclaimed", "", f"done after {parts[1]} attempts; a lease ran out and the run was reclaimed")
    if outcome == "dead":
        return ("dead", "", f"dead after {parts[1]} attempt(s)")
    if outcome == "pending":
        n = parts[1]
        return ("pending", "", f"waiting to retry after attempt {n}" if n else "due, not started yet")
    if outcome == "running":
        return ("running", "", f"attempt {parts[1]} running")
    if outcome == "never_started":
        return ("never_started", "", "created, never started (pending past its slot and grace)")
    if outcome == "skipped":
        return ("skipped", parts[1], _SKIP_TEXT[parts[1]])
    if outcome == "unplanned":
        return ("unplanned", "", f.planned_text)
    if outcome == "pruned":
        return ("pruned", "", f.cutoff_text)
    if outcome == "unexplained":
        lost = parts[1]
        if lost:
            return (
                "unexplained",
                "",
                f"{NO_RECORD} ({lost} slot(s) missing, more than the catch-up counted: "
                f"missed_slots = {f.missed_slots})",
            )
        return ("unexplained", "", NO_RECORD)
    reason = parts[1]
    if reason == "paused" and len(parts) > 2:  # an ended pause
        return ("missed", reason, parts[2])
    text = {
        "paused": f.paused_text,
        "broken": f.broken_text,
        "disabled": "the schedule is disabled (no longer applied)",
        "before_created": f.created_text,
        "timing_changed": "the timing changed: runs of another timing come before and after it",
        "catchup": f"dropped by catch-up {f.catchup} (counted in missed_slots)",
    }[reason]
    return ("missed", reason, text)
