"""The fault injector: at moments drawn from the seed, it SIGKILLs workers mid-run, stops workers past
their lease and lets them go on (zombies), restarts workers gracefully through supervisord (as a deploy
does), SIGKILLs a ticker, restarts PostgreSQL and starves it of connections. Each fault is recorded
in `loadtest_faults` with the database's clock and, for a worker, the runs it held (from
`job_runs.locked_by`), so the audit can time their reclaim.

The moments are reproducible from the seed; the targets are drawn from the seed too, among the workers
that hold runs at that moment, which depends on timing.
"""

from __future__ import annotations

import contextlib
import heapq
import random
import threading
import time
import xmlrpc.client
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fleet.process.supervisor import WORKER_GROUP
from fleet.store.db import connect
from loadtest.database import Server, db_clock
from loadtest.fleetrun import FleetRun, Peak, vm_hwm_kb
from loadtest.profile import LoadConfig
from loadtest.queries import q

KINDS = ("worker_kill", "zombie", "worker_restart", "ticker_kill", "pg_restart", "starvation")
_PICK_BUSY_S = 3.0  # how long to look for a worker holding runs before taking any running worker
_PICK_ANY_S = 10.0  # how long to look for any running worker before giving the fault up
_STOP_JOIN_S = 90.0  # a database restart in progress finishes first
_DB_WAIT_S = 60.0
_RESTART_WAIT_S = 60.0  # a stopping worker has its grace period and the hand-back
_RESTART_PICKS = 3


@dataclass(order=True, frozen=True)
class Planned:
    at_s: float  # seconds after the load window opens
    kind: str


def plan_faults(cfg: LoadConfig) -> list[Planned]:
    """The faults of a run and their moments: a pure function of the configuration and its seed.

    Kills and zombies are spread evenly with jitter over the window (leaving its first and last few
    seconds alone); database restarts fall in its middle, starvations away from the restarts.
    """
    rng = random.Random(cfg.seed)
    d = cfg.duration_s
    margin = min(5.0, 0.1 * d)
    lo, hi = margin, d - margin

    def spread(n: int, a: float, b: float) -> list[float]:
        return [a + (i + rng.random()) * (b - a) / n for i in range(n)] if n > 0 else []

    out = [Planned(t, "worker_kill") for t in spread(cfg.kills, lo, hi)]
    out += [Planned(t, "zombie") for t in spread(cfg.zombies, lo, max(lo, hi - cfg.zombie_stop_s))]
    out += [Planned(t, "worker_restart") for t in spread(cfg.restarts, lo, hi)]
    out += [Planned(t, "ticker_kill") for t in spread(cfg.ticker_kills, lo, hi)]
    restarts = spread(cfg.pg_restarts, 0.3 * d, 0.7 * d)
    out += [Planned(t, "pg_restart") for t in restarts]
    for t in spread(cfg.starvations, lo, max(lo, hi - cfg.starve_s)):
        for r in restarts:  # keep a starvation clear of a restart, so each fault's cost stays readable
            if abs(t - r) < cfg.starve_s + 5:
                t = (
                    r + cfg.starve_s + 5
                    if r + 2 * cfg.starve_s + 5 < hi
                    else max(lo, r - 2 * cfg.starve_s - 5)
                )
        out.append(Planned(t, "starvation"))
    return sorted(out)


@dataclass
class Record:
    """One fault as it happened."""

    kind: str
    at: datetime
    target: str | None = None
    pid: int | None = None
    ended_at: datetime | None = None
    held: list[dict[str, Any]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


class Injector(threading.Thread):
    """Runs the fault plan against a fleet until the plan is done or `stop()` is called."""

    def __init__(
        self,
        fleet: FleetRun,
        server: Server,
        url: str,
        cfg: LoadConfig,
        t0_mono: float,
        say: Callable[[str], None] = print,
    ) -> None:
        super().__init__(name="loadtest-faults", daemon=True)
        self.fleet = fleet
        self.server = server
        self.url = url
        self.cfg = cfg
        self.t0 = t0_mono
        self.say = say
        self.rng = random.Random(cfg.seed + 1)
        self.halt = threading.Event()
        self.records: list[Record] = []
        self.problems: list[str] = []  # faults that could not be delivered, and why
        self._queue: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._zombies: dict[int, Record] = {}
        self._restarting: dict[str, tuple[float, Record]] = {}
        self._starving: list[psycopg.Connection[Any]] = []
        self._starvation: Record | None = None
        for p in plan_faults(cfg):
            self._push(p.at_s, p.kind, None)

    # -- the loop --------------------------------------------------------------------------------

    def _push(self, at_s: float, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at_s, self._seq, kind, payload))

    def run(self) -> None:
        while self._queue and not self.halt.is_set():
            at_s = self._queue[0][0]
            wait = self.t0 + at_s - time.monotonic()
            if wait > 0:
                self.halt.wait(min(wait, 0.5))
                continue
            _, _, kind, payload = heapq.heappop(self._queue)
            try:
                getattr(self, f"_do_{kind}")(payload)
            except Exception as e:  # noqa: BLE001 - a fault that failed is reported, the run goes on
                self.problems.append(f"{kind} at {at_s:.1f}s: {type(e).__name__}: {e}")

    def stop(self) -> None:
        """Stop injecting; continue any stopped worker and release starved connections."""
        self.halt.set()
        if self.is_alive():
            self.join(_STOP_JOIN_S)
        for pid in list(self._zombies):
            with contextlib.suppress(Exception):
                self._do_zombie_end(pid)
        end = time.monotonic() + _RESTART_WAIT_S
        while self._restarting and time.monotonic() < end:
            for name in list(self._restarting):
                with contextlib.suppress(Exception):
                    self._do_worker_restart_end(name, requeue=False)
            time.sleep(0.2)
        if self._starvation is not None:
            with contextlib.suppress(Exception):
                self._do_starvation_end(None)
        if self._conn is not None:
            self._conn.close()

    def delivered(self) -> dict[str, int]:
        return {k: sum(1 for r in self.records if r.kind == k) for k in KINDS}

    # -- database bookkeeping ----------------------------------------------------------------------

    def _db(self) -> psycopg.Connection[Any]:
        """The injector's own connection, opened again after a restart broke it."""
        end = time.monotonic() + _DB_WAIT_S
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(self.url, "loadtest faults")
                self._conn.execute("SELECT 1")
                return self._conn
            except Exception as e:  # noqa: BLE001 - the database may be down on purpose
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if time.monotonic() > end:
                    raise RuntimeError(f"the database cannot be reached: {e}") from None
                time.sleep(0.2)

    def _clock(self) -> datetime:
        return db_clock(self._db())

    def _held(self, worker: str) -> tuple[datetime, list[dict[str, Any]]]:
        """The database's time and the runs `worker` holds (schedule, slot, attempt)."""
        rows = self._db().execute(q("runs_held"), {"worker": worker}).fetchall()
        at = rows[0]["at"] if rows else self._clock()
        held = [
            {"schedule": r["schedule_name"], "slot": r["scheduled_for"].isoformat(), "attempt": r["attempts"]}
            for r in rows
        ]
        return at, held

    def _busy(self) -> set[str]:
        return {r["worker_id"] for r in self._db().execute(q("runs_held_by_workers"))}

    def _save(self, r: Record) -> None:
        self.records.append(r)
        self._db().execute(
            q("fault_insert"),
            {
                "kind": r.kind,
                "target": r.target,
                "pid": r.pid,
                "at": r.at,
                "ended_at": r.ended_at,
                "held": Jsonb(r.held),
                "detail": Jsonb(r.detail),
            },
        )

    # -- choosing a target -----------------------------------------------------------------------

    def _pick_worker(self, keep_one: bool) -> tuple[str, int] | None:
        """A running worker, preferably one holding runs; None when there is none in time."""
        start = time.monotonic()
        while not self.halt.is_set() and time.monotonic() - start < _PICK_ANY_S:
            running = self.fleet.running("worker")
            if keep_one and len(running) < 2:
                running = {}
            busy = self._busy() if running else set()
            names = sorted(n for n in running if self.fleet.process_id(n) in busy)
            if not names and time.monotonic() - start > _PICK_BUSY_S:
                names = sorted(running)
            if names:
                name = self.rng.choice(names)
                return name, running[name]
            self.halt.wait(0.1)
        return None

    def _note_peak(self, name: str, pid: int) -> None:
        """A process about to be killed: its VmHWM now is its peak."""
        kb = vm_hwm_kb(pid)
        if kb is not None:
            peak = self.fleet.peaks.setdefault((name, pid), Peak(name, pid, name.split("_")[0]))
            peak.kb = max(peak.kb, kb)

    # -- the faults ------------------------------------------------------------------------------

    def _do_worker_kill(self, _: Any) -> None:
        picked = self._pick_worker(keep_one=False)
        if picked is None:
            self.problems.append("worker_kill: no running worker to kill")
            return
        name, pid = picked
        wid = self.fleet.process_id(name)
        self._note_peak(name, pid)
        at, held = self._held(wid)
        self.fleet.kill_process(pid)
        _, after = self._held(wid)  # a dead worker's rows cannot change: what it held at death
        held += [h for h in after if h not in held]
        self._save(Record("worker_kill", at, name, pid, held=held))

    def _do_zombie(self, _: Any) -> None:
        picked = self._pick_worker(keep_one=True)
        if picked is None:
            self.problems.append("zombie: no second running worker to stop")
            return
        name, pid = picked
        wid = self.fleet.process_id(name)
        at, held = self._held(wid)
        self.fleet.stop_process(pid)
        _, after = self._held(wid)
        held += [h for h in after if h not in held]
        self._zombies[pid] = Record(
            "zombie", at, name, pid, held=held, detail={"stopped_s": self.cfg.zombie_stop_s}
        )
        self._push(time.monotonic() - self.t0 + self.cfg.zombie_stop_s, "zombie_end", pid)

    def _do_zombie_end(self, pid: int) -> None:
        r = self._zombies.pop(pid, None)
        self.fleet.cont(pid)
        if r is not None:
            r.ended_at = self._clock()
            self._save(r)

    def _do_worker_restart(self, _: Any) -> None:
        """A graceful restart, as a deploy does it: supervisord sends SIGTERM, the worker finishes or hands
        back its runs within its grace period and exits; then it is started again.

        A worker can leave RUNNING between the pick and the stop (it exited on its own); another is
        picked then, a bounded number of times."""
        for _try in range(_RESTART_PICKS):
            picked = self._pick_worker(keep_one=True)
            if picked is None:
                self.problems.append("worker_restart: no second running worker to restart")
                return
            name, pid = picked
            self._note_peak(name, pid)
            at, held = self._held(self.fleet.process_id(name))
            assert self.fleet.sv is not None
            try:
                self.fleet.sv.stop(f"{WORKER_GROUP}:{name}")
            except xmlrpc.client.Fault as e:
                if "NOT_RUNNING" not in e.faultString:
                    raise
                continue
            self._restarting[name] = (time.monotonic(), Record("worker_restart", at, name, pid, held=held))
            self._push(time.monotonic() - self.t0 + 0.2, "worker_restart_end", name)
            return
        self.problems.append(f"worker_restart: {_RESTART_PICKS} picked workers had stopped before their stop")

    def _do_worker_restart_end(self, name: str, requeue: bool = True) -> None:
        since, r = self._restarting[name]
        state = {p.name: p.state for p in self.fleet.processes()}.get(name)
        if state not in ("STOPPED", "EXITED", "FATAL") and time.monotonic() - since < _RESTART_WAIT_S:
            if requeue:
                self._push(time.monotonic() - self.t0 + 0.2, "worker_restart_end", name)
            return
        del self._restarting[name]
        r.ended_at = self._clock()
        r.detail = {"stopped_after_s": round(time.monotonic() - since, 3), "state": state}
        assert self.fleet.sv is not None
        self.fleet.sv.start(f"{WORKER_GROUP}:{name}")
        self._save(r)

    def _do_ticker_kill(self, _: Any) -> None:
        running = self.fleet.running("ticker")
        if not running:
            self.problems.append("ticker_kill: no running ticker")
            return
        name = self.rng.choice(sorted(running))
        at = self._clock()
        self.fleet.kill_process(running[name])
        self._save(Record("ticker_kill", at, name, running[name]))

    def _do_pg_restart(self, _: Any) -> None:
        if not self.server.can_restart:
            self.problems.append("pg_restart: the server cannot be restarted (give --pg-restart-cmd)")
            return
        at = self._clock()
        started = time.monotonic()
        self.server.restart()
        took = time.monotonic() - started
        self.say(f"PostgreSQL restarted ({took:.1f} s)")
        self._save(
            Record(
                "pg_restart", at, "postgresql", ended_at=self._clock(), detail={"restart_s": round(took, 3)}
            )
        )

    def _do_starvation(self, _: Any) -> None:
        if self._starvation is not None:
            return
        row = (
            self._db()
            .execute(
                "SELECT current_setting('max_connections')::int AS max_conn, "
                "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS used"
            )
            .fetchone()
        )
        assert row is not None
        want = max(0, row["max_conn"] - row["used"] - self.cfg.starve_keep)
        at = self._clock()
        error = None
        for _ in range(want):
            try:
                self._starving.append(
                    psycopg.connect(
                        self.url, autocommit=True, connect_timeout=5, application_name="loadtest starvation"
                    )
                )
            except psycopg.Error as e:
                error = str(e).strip().splitlines()[0]
                break
        self._starvation = Record(
            "starvation",
            at,
            "postgresql",
            detail={
                "connections": len(self._starving),
                "max_connections": row["max_conn"],
                "in_use_before": row["used"],
                "left_free": self.cfg.starve_keep,
                "error": error,
            },
        )
        self._push(time.monotonic() - self.t0 + self.cfg.starve_s, "starvation_end", None)

    def _do_starvation_end(self, _: Any) -> None:
        for c in self._starving:
            with contextlib.suppress(Exception):
                c.close()
        self._starving = []
        r, self._starvation = self._starvation, None
        if r is not None:
            r.ended_at = self._clock()
            self._save(r)
