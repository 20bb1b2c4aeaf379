"""What each dashboard page shows, read from the database through named statements, and the
operator's actions, through fleetctl's own repairs."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Generic, TypeVar

import orjson
import psycopg

from fleet.admin.audit import audit_list, summary
from fleet.admin.repair import (
    check_note,
    run_discard,
    run_retry,
    run_trigger,
    schedule_pause,
    schedule_resume,
)
from fleet.errors import UsageError
from fleet.health import verdicts
from fleet.health.reading import health_report, run_history
from fleet.health.results import ScheduleHealth
from fleet.health.verdicts import FleetHealth
from fleet.health.verify import verify
from fleet.observe import logs
from fleet.ops.jaeger import jaeger_search_url
from fleet.ops.status import fleet_lines, live_processes, retrying_note, schedule_health
from fleet.ops.targets import iso, parse_instant, schedule_row
from fleet.store.queries import q
from fleet.store.registry import STALE_AFTER_S
from fleet.timing.schedule import TimingError, nominal_interval, timing_of

from .charts import Coverage, coverage, plots
from .config import trace_link
from .timeline import Timeline, layout, run_status

OVERVIEW_PAGE: Final = 100  # schedules per overview page
STRIP_SLOTS: Final = 24  # recent slots in each overview row
TIMELINE_SLOTS: Final = 30  # slots per timeline page
MAX_TIMELINE_SLOTS: Final = 200
MAX_ATTEMPTS: Final = 2000  # attempts drawn on one timeline page
DEAD_SHOWN: Final = 50
AUDIT_SHOWN: Final = 20  # the latest audit rows on a schedule's page
MAX_PROCESS_RUNS: Final = 1000
MAX_ARGS_BYTES: Final = 8192
# What a page shows of a value that can be large (args hold up to 64 KiB, an error 4,000
# characters): the rest is cut, with a marker saying how much. The full args are one link away
# (`.../args.json`), the full error in `fleetctl show`. With these, no page grows with the size of
# what the database holds, only with the bounded number of rows it shows.
SHOWN: Final = {
    "args_in_table": 200,  # a run's args in a schedule's table of slots
    "args": 2000,  # a schedule's args, a slot's args
    "error_in_table": 500,  # a run's error in a table
    "error_in_tooltip": 120,  # an attempt's error over its bar on the timeline
    "error": 4000,  # an attempt's error on its slot's page
}
SLOT_ATTEMPTS_SHOWN: Final = 100  # the newest attempts on a slot's page
PLOTTED_ATTEMPTS: Final = 200  # the newest attempts in a schedule's plots of lag and duration
# A schedule page's coverage strip verifies the last day, or fewer hours of a schedule that fires
# more often than every 2 seconds (its slots, at most this many, are enumerated at each load). The
# ledger as JSON takes a window of up to a month, as long as it holds no more than MAX_LEDGER_SLOTS.
COVERAGE_WINDOW: Final = timedelta(days=1)
COVERAGE_SLOTS: Final = 50_000
MAX_LEDGER_WINDOW: Final = timedelta(days=31)
MAX_LEDGER_SLOTS: Final = 2_000_000
LEDGER_RANGES: Final = 500
VERDICTS: Final = verdicts.SEVERITY
# What the overview shows of each verdict, in its legend.
VERDICT_MEANINGS: Final[dict[str, str]] = {
    "BROKEN": "its timing cannot be evaluated: fix the schedule",
    "DEAD": "dead runs wait for a retry or discard",
    "NO-TICKER": "no live ticker: no slot is created",
    "TICKER-CRASHING": "a ticker met an unexpected error lately",
    "NO-WORKER": "runs whose job no live worker serves",
    "OVERDUE": "a slot's run was not done by its deadline",
    "BACKLOG": "a due run waits longer than an interval",
    "LATE": "no success for two intervals",
    "RETRYING": "a run waits to retry; under overlap skip, later slots are skipped meanwhile",
    "PAUSED": "paused by an operator",
    "DISABLED": "no longer in the schedules file",
    "ENDED": "past its calendar's until: no slot left",
    "OK": "healthy",
}
assert tuple(VERDICT_MEANINGS) == VERDICTS

T = TypeVar("T")
# The overview's read: the fleet's tickers and every schedule's health.
Report = tuple[FleetHealth, list[ScheduleHealth]]


class SharedHealth(Generic[T]):
    """Every schedule's health for the overview, shared by every page open on it, kept fresh by a
    thread of its own while anyone watches.

    An open overview asks again every refresh period. Computing the verdicts of many schedules for
    each request would make every page as slow as that computation and multiply the database's work
    by the number of operators watching. Instead one computation serves everybody: while pages keep
    asking (within `watch_s`), a background thread computes anew every `max_age_s`, and a page is
    served the latest result at once. A page that finds none, or one older than twice `max_age_s`
    (nobody watched for a while), or asks after an action taken from the dashboard (`invalidate`),
    waits for a computation of its own, shared with any page asking meanwhile.
    """

    def __init__(
        self,
        compute: Callable[[], T],
        max_age_s: float,
        *,
        watch_s: float | None = None,
        background: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.compute = compute
        self.max_age_s = max_age_s
        self.watch_s = 3 * max_age_s if watch_s is None else watch_s
        self.clock = clock
        self._state = threading.Lock()  # guards the fields below
        self._computing = threading.Lock()  # one computation at a time
        self._rows: T | None = None
        self._at = 0.0  # when the rows were computed (started)
        self._asked = float("-inf")
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._refresh, name="dashboard-health", daemon=True)
            self._thread.start()

    def get(self) -> T:
        with self._state:
            now = self.clock()
            self._asked = now
            rows, at = self._rows, self._at
        self._wake.set()
        if rows is not None and now - at < 2 * self.max_age_s:
            return rows
        return self._recompute(newer_than=at)

    def invalidate(self) -> None:
        with self._state:
            self._rows = None

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)

    def _recompute(self, newer_than: float) -> T:
        with self._computing:
            with self._state:
                if self._rows is not None and self._at > newer_than:
                    return self._rows  # another page computed it meanwhile
            started = self.clock()
            rows = self.compute()
            with self._state:
                self._rows, self._at = rows, started
            return rows

    def _refresh(self) -> None:
        while not self._closed.is_set():
            with self._state:
                watched = self.clock() - self._asked < self.watch_s
                due_in = self._at + self.max_age_s - self.clock() if self._rows is not None else 0.0
            if not watched:
                self._wake.wait()  # nobody watches: no work until a page asks
                self._wake.clear()
                continue
            if due_in > 0:
                self._closed.wait(due_in)
                continue
            try:
                self._recompute(newer_than=self.clock() - self.max_age_s / 2)
            except Exception as e:  # noqa: BLE001 - a page that asks computes (and reports) it itself
                logs.event("dashboard_refresh_failed", error=str(e).strip()[:300])
                self._closed.wait(self.max_age_s)


def clip(text: str | None, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker counting what was left out."""
    if not text:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


@dataclass
class OverviewRow:
    health: ScheduleHealth
    strip: list[dict[str, Any]]  # newest last
    retrying: str | None = None  # which run waits to retry, and what it does to later slots


def overview(
    conn: psycopg.Connection[Any],
    verdict: str | None,
    name: str | None,
    page: int,
    shared: SharedHealth[Report] | None = None,
) -> dict[str, Any]:
    """Every schedule's health, filtered by verdict and by a part of its name, one page of them,
    and the fleet-wide alarms (no live ticker, crashing tickers) above them. With `shared`, the
    verdicts come from its latest computation (see SharedHealth)."""
    fleet, every = shared.get() if shared is not None else health_report(conn)
    counts = {v: 0 for v in VERDICTS}
    for h in every:
        counts[h.verdict] += 1
    needle = (name or "").strip().lower()
    chosen = [h for h in every if (verdict is None or h.verdict == verdict) and needle in h.name.lower()]
    pages = max(1, -(-len(chosen) // OVERVIEW_PAGE))
    page = min(max(1, page), pages)
    shown = chosen[(page - 1) * OVERVIEW_PAGE : page * OVERVIEW_PAGE]
    strips: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if shown:
        for r in conn.execute(q("run_recent_strip"), {"names": [h.name for h in shown], "per": STRIP_SLOTS}):
            r["status"] = run_status(r)
            strips[r["name"]].insert(0, r)
    return {
        "rows": [OverviewRow(h, strips[h.name], retrying_note(h)) for h in shown],
        "total": len(every),
        "matching": len(chosen),
        "counts": counts,
        "unhealthy": sum(1 for h in every if not h.healthy),
        "fleet_alarms": fleet_lines(fleet, every),
        "page": page,
        "pages": pages,
    }


def schedule_page(
    conn: psycopg.Connection[Any], name: str, before: datetime | None, limit: int, *, full: bool = True
) -> dict[str, Any]:
    """One schedule: its health, a page of its slots laid out as a timeline, its dead runs, plots of
    its recent lag and durations, the latest audit rows (who did what to it), and (`full`: not for
    a live refresh) its coverage strip."""
    row = schedule_row(conn, name)
    (h,) = schedule_health(conn, [name])
    limit = min(max(1, limit), MAX_TIMELINE_SLOTS)
    runs = conn.execute(q("run_page"), {"name": name, "before": before, "limit": limit}).fetchall()
    attempts: list[dict[str, Any]] = []
    if runs:
        first, last = runs[-1]["scheduled_for"], runs[0]["scheduled_for"]
        attempts = conn.execute(
            q("attempt_range"), {"name": name, "first": first, "last": last, "limit": MAX_ATTEMPTS}
        ).fetchall()
    workers = sorted({a["worker_id"] for a in attempts} | {r["locked_by"] for r in runs if r["locked_by"]})
    seen = {p["id"]: p["seen_at"] for p in conn.execute(q("process_seen"), {"ids": workers})}
    timeline: Timeline = layout(runs, attempts, seen, row["db_now"])
    dead = conn.execute(
        q("run_list"), {"name": name, "status": "dead", "outcome": None, "limit": DEAD_SHOWN}
    ).fetchall()
    for r in runs:
        r["shown_status"] = run_status(r)
    audit = [(a, summary(a)) for a in audit_list(conn, name, None, AUDIT_SHOWN)]
    recent = conn.execute(q("attempt_recent"), {"name": name, "limit": PLOTTED_ATTEMPTS}).fetchall()
    lag, took = plots(recent, row["db_now"])
    return {
        "coverage": schedule_coverage(conn, row) if full else None,
        "lag_plot": lag,
        "duration_plot": took,
        "schedule": row,
        "health": h,
        "audit": audit,
        "retrying": retrying_note(h),
        "runs": runs,
        "timeline": timeline,
        "dead": dead,
        "older": runs[-1]["scheduled_for"] if len(runs) == limit else None,
        "limit": limit,
        "args_json": orjson.dumps(row["args"]).decode(),
    }


def schedule_coverage(conn: psycopg.Connection[Any], row: dict[str, Any]) -> Coverage:
    """The schedule's coverage strip: what became of its slots over its coverage window."""
    until: datetime = row["db_now"]
    since = until - coverage_window(row, until, COVERAGE_WINDOW, COVERAGE_SLOTS)
    (ledger,) = verify(conn, [row["name"]], since, until, now=until, limit=LEDGER_RANGES).schedules
    return coverage(ledger)


def coverage_window(row: dict[str, Any], at: datetime, longest: timedelta, slots: int) -> timedelta:
    """The longest window up to `longest` that holds about `slots` of the schedule's slots at most."""
    try:
        cadence = nominal_interval(timing_of(row), at)
    except TimingError:
        return longest
    return min(longest, max(cadence, timedelta(seconds=1)) * slots)


def ledger_json(
    conn: psycopg.Connection[Any], name: str, since: datetime | None, until: datetime | None
) -> dict[str, Any]:
    """The schedule's slot ledger as `fleetctl verify --json` gives it, over [since, until] (by
    default its coverage window); UsageError for a window longer than a month or holding more than
    MAX_LEDGER_SLOTS slots (`fleetctl verify` takes those)."""
    row = schedule_row(conn, name)
    end = until or row["db_now"]
    start = since or end - coverage_window(row, end, COVERAGE_WINDOW, COVERAGE_SLOTS)
    if end - start > MAX_LEDGER_WINDOW:
        raise UsageError(
            f"since: a window of at most {MAX_LEDGER_WINDOW.days} days here; fleetctl verify takes longer"
        )
    if end - start > coverage_window(row, end, end - start, MAX_LEDGER_SLOTS):
        raise UsageError(
            f"since: more than {MAX_LEDGER_SLOTS:,} slots in the window here; fleetctl verify takes them"
        )
    result = verify(
        conn, [name], start, end, max_window=MAX_LEDGER_WINDOW, limit=LEDGER_RANGES, labels={"since": "since"}
    )
    return result.to_json()


def slot_page(
    conn: psycopg.Connection[Any], name: str, slot: datetime, trace_url: str, jaeger: str
) -> dict[str, Any]:
    """One slot's story: its attempts in order (the newest SLOT_ATTEMPTS_SHOWN), each with the wait
    before it and, when its worker exported it, its trace.

    The wait before an attempt runs from the end of the one before it: the back-off after a
    failure; after a lost lease, from when that attempt's worker was last heard from (its lease's
    last renewal), so it counts the lease running out and the reclaim."""
    h = run_history(conn, name, slot).to_json()
    # Every claim makes trace ids, but only a worker with tracing on exports a span under them:
    # a link to a trace nobody sent would only find nothing.
    traced = any(a["traced"] for a in h["attempt_history"])
    h["jaeger_url"] = jaeger_search_url(jaeger, name, slot) if traced else None
    previous_end: datetime | None = None
    for a in h["attempt_history"]:
        started = parse_instant(a["started_at"], "started_at") if a["started_at"] else None
        ended = parse_instant(a["finished_at"], "finished_at") if a["finished_at"] else None
        a["waited_s"] = (started - previous_end).total_seconds() if started and previous_end else None
        a["duration_s"] = (ended - started).total_seconds() if started and ended else None
        a["trace_link"] = trace_link(trace_url, a["trace_id"], a["span_id"]) if a["traced"] else None
        renewed = a.get("renewed_at")
        if a["outcome"] == "lease_expired":
            # Recorded as ending at the reclaim; the run stopped being served at the last renewal.
            previous_end = parse_instant(renewed, "renewed_at") if renewed else None
        else:
            previous_end = ended
    h["attempts_not_shown"] = max(0, len(h["attempt_history"]) - SLOT_ATTEMPTS_SHOWN)
    h["attempt_history"] = h["attempt_history"][-SLOT_ATTEMPTS_SHOWN:]
    h["args_json"] = orjson.dumps(h["args"]).decode()
    return h


def workers_page(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Live tickers and workers by host, each with the runs it holds now."""
    procs = live_processes(conn)
    held: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ids = [p["id"] for p in procs if p["kind"] == "worker"]
    if ids:
        for r in conn.execute(q("process_runs"), {"ids": ids, "limit": MAX_PROCESS_RUNS}):
            held[r["locked_by"]].append(r)
    hosts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in procs:
        p["holds"] = held.get(p["id"], [])
        hosts[p["host"]].append(p)
    return {"hosts": dict(sorted(hosts.items())), "count": len(procs), "stale_s": STALE_AFTER_S}


# -- actions -------------------------------------------------------------------------------------


def parse_args_json(text: str | None) -> Any:
    """The Trigger form's args: empty for the schedule's own, else a JSON object."""
    if text is None or not text.strip():
        return None
    if len(text.encode()) > MAX_ARGS_BYTES:
        raise UsageError(f"args: at most {MAX_ARGS_BYTES} bytes of JSON")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise UsageError(f"args: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise UsageError('args: must be a JSON object, such as {"format": "pdf"}')
    return value


def act(
    conn: psycopg.Connection[Any], name: str, action: str, form: dict[str, str], by: str = "dashboard"
) -> str:
    """Carry out one action on a schedule, its audit row saying `by`; returns what happened, in
    words. UsageError: bad input."""
    if action in ("retry", "discard"):
        slot = parse_instant(form.get("slot", ""), "slot")
        changed = (run_retry if action == "retry" else run_discard)(conn, name, slot, by=by)
        verb = "retried" if action == "retry" else "discarded"
        return f"{verb} {iso(slot)}" if changed else f"{iso(slot)} was {verb} already"
    if action == "trigger":
        t = run_trigger(conn, name, parse_args_json(form.get("args")), by=by)
        if t.created:
            return f"triggered {iso(t.slot)}"
        return f"{iso(t.slot)} exists already: not triggered again"
    if action == "pause":
        note = check_note(form.get("note"), "note")
        if schedule_pause(conn, name, note=note, by=by):
            return "paused"
        return "paused already; note updated" if note else "paused already"
    if action == "resume":
        nxt = schedule_resume(conn, name, note=check_note(form.get("note"), "note"), by=by)
        return f"resumed: next slot {iso(nxt)}" if nxt else "not paused"
    raise UsageError(f"action: unknown action {action!r}")
