"""The ticker's loop: tick, then sleep until the earliest next slot, waking early on NOTIFY."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from fleet.errors import DatabaseUnavailable, SchemaOutdated
from fleet.observe import logs, telemetry
from fleet.process.settings import TickerSettings
from fleet.store import chores
from fleet.store.db import (
    connect,
    connect_retrying,
    describe,
    permission_denied,
    prepared_statements_broke,
    redact,
    resolve_url,
)
from fleet.store.keys import LEADER_LOCK, SCHEDULES_CHANNEL
from fleet.store.migrate import check_schema
from fleet.store.queries import q
from fleet.store.registry import process_crash, process_register, process_remove, process_touch
from fleet.ticker import settle
from fleet.ticker.housekeeping import ticker_chores
from fleet.ticker.tick import TickResult, run_once

_RECONNECT_DEADLINE_S = 365 * 86400.0  # keep trying: a process manager restarting us helps nobody
_WAIT_SLICE_S = 0.25  # longest uninterrupted wait, so a stop request is seen promptly
_STEP_ERROR_WAIT_S = 1.0  # the pause after a step's unexpected error, so a repeating one cannot spin
# Wake-ups by NOTIFY are at least this far apart, whatever arrives meanwhile counting as one: any
# session may notify the channel, and a flood of notifications costs a ticker ten ticks a second.
# Slots never wait for a notification (the ticker wakes for them itself); a changed schedule is
# picked up within this.
_NOTIFY_GAP_S = 0.1


class Ticker:
    """Runs ticks until `stop` is set (or, with until_idle, until nothing is due)."""

    def __init__(self, settings: TickerSettings, stop: threading.Event | None = None) -> None:
        self.settings = settings
        self.lookahead = timedelta(seconds=settings.lookahead_s)
        self.stop = stop or threading.Event()
        self.url = resolve_url(settings.database_url)
        self.conn: psycopg.Connection[Any] | None = None
        self.listen: psycopg.Connection[Any] | None = None
        self.is_leader = not settings.leader
        self.chores = ticker_chores(settings)
        self.chores_due = 0.0  # monotonic time at which the earliest chore is due
        self.last_touch = 0.0
        self.ticks = 0
        # db_unavailable and db_error: when the trouble starts, then every 30 s while it lasts
        self._unavailable_log = logs.Throttle()
        self._retried_unprepared = False
        # an unexpected error not yet recorded on the registry row (no connection at the time)
        self._unrecorded_error: str | None = None
        self._notified_mono = -_NOTIFY_GAP_S  # when a NOTIFY last woke this ticker

    def _connect(self) -> None:
        app = f"fleet-ticker {self.settings.ticker_id}"
        self.conn = connect_retrying(
            self.url,
            app,
            _RECONNECT_DEADLINE_S,
            self._unavailable,
            prepare=self.settings.prepared_statements,
            stop=self.stop,
        )
        self.listen = connect(self.url, app + " listen", listen=True)
        self.listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(SCHEDULES_CHANNEL)))
        check_schema(self.conn)
        process_register(self.conn, self.settings.ticker_id, "ticker")
        if self._unrecorded_error is not None:
            process_crash(self.conn, self.settings.ticker_id, "ticker", self._unrecorded_error)
            self._unrecorded_error = None
        chores.register(self.conn, self.chores)
        self.chores_due = 0.0
        self._unavailable_log.reset()
        self.is_leader = not self.settings.leader

    def _unavailable(self, e: Exception) -> None:
        if self._unavailable_log.due():
            logs.event("db_unavailable", ticker_id=self.settings.ticker_id, error=describe(e))

    def _close(self) -> None:
        for c in (self.conn, self.listen):
            if c is not None and not c.closed:
                c.close()
        self.conn = self.listen = None

    def _hold_leadership(self) -> bool:
        """Take or keep the leader lock (with --leader); the lock lives as long as the listen session.
        Without --leader every ticker ticks, and there is no lock to keep."""
        assert self.listen is not None
        if self.is_leader:
            if self.settings.leader:
                self.listen.execute("SELECT 1")  # a dead session would mean the lock is gone
            return True
        got = self.listen.execute("SELECT pg_try_advisory_lock(%s) AS ok", (LEADER_LOCK,)).fetchone()
        self.is_leader = bool(got and got["ok"])
        if self.is_leader:
            logs.event("leader_acquired", ticker_id=self.settings.ticker_id)
        return self.is_leader

    def run(self) -> int:
        logs.event("ticker_started", ticker_id=self.settings.ticker_id, database=redact(self.url))
        code = 0
        ended_by: str | None = None  # the unexpected error that ends the ticker, if one does
        try:
            while not self.stop.is_set():
                try:
                    if self.conn is None:
                        self._connect()
                    done = self._step()
                    if done:
                        break
                except (psycopg.Error, DatabaseUnavailable, SchemaOutdated) as e:
                    if self.stop.is_set():
                        break  # asked to stop while the database was out of reach
                    denied = permission_denied(e, self.url, "fleet_ticker")
                    if denied is not None:
                        # A missing grant does not heal by retrying: say which, and exit 2.
                        logs.event("permission_denied", ticker_id=self.settings.ticker_id, error=str(denied))
                        code = 2
                        break
                    # Keep trying (server restarting, schema not migrated yet): a process manager
                    # gives up on a program that exits quickly a few times.
                    self._close()
                    # Prepared statements broken by a proxy are said once (the connection opened
                    # next prepares nothing); other errors when they start and every 30 s.
                    broke = prepared_statements_broke(e, ticker_id=self.settings.ticker_id)
                    if not broke and self._unavailable_log.due():
                        event = "db_unavailable" if isinstance(e, DatabaseUnavailable) else "db_error"
                        logs.event(event, ticker_id=self.settings.ticker_id, error=describe(e))
                    if broke and not self._retried_unprepared:
                        # The next connection prepares nothing: tick again at once, so a slot due
                        # now is not a second late (past its grace, a missed slot).
                        self._retried_unprepared = True
                        continue
                    self.stop.wait(1.0)
                except Exception as e:  # noqa: BLE001 - a step's bug must not stop every schedule
                    # Dying would leave the fleet without slots until someone restarts it, and a
                    # restart would meet the same error: say it, count it on the registry row
                    # (status shows TICKER-CRASHING), and go on after a pause.
                    self._step_failed(e)
                    self.stop.wait(_STEP_ERROR_WAIT_S)
        except Exception as e:
            ended_by = logs.error_text(e)
            logs.event("ticker_crashed", ticker_id=self.settings.ticker_id, error=ended_by)
            raise
        finally:
            if self.conn is not None and not self.conn.closed:
                with contextlib.suppress(psycopg.Error):
                    if ended_by is None:
                        process_remove(self.conn, self.settings.ticker_id)
                    else:  # the row stays, with the error, for status to show
                        process_crash(self.conn, self.settings.ticker_id, "ticker", ended_by)
            self._close()
            logs.event("ticker_stopped", ticker_id=self.settings.ticker_id, ticks=self.ticks)
        return code

    def _step_failed(self, e: Exception) -> None:
        """Log a step's unexpected error as `tick_error` and record it on this ticker's registry row
        (on the next connection if this one cannot take it)."""
        error = logs.error_text(e)
        logs.event("tick_error", ticker_id=self.settings.ticker_id, error=error)
        conn = self.conn
        if conn is None or conn.closed:
            self._unrecorded_error = error
            return
        try:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()  # the error may have left a transaction open
            process_crash(conn, self.settings.ticker_id, "ticker", error)
        except psycopg.Error:
            self._unrecorded_error = error
            self._close()  # a connection in an unknown state: the next step opens another

    def _step(self) -> bool:
        """One tick and the sleep after it; True when an until-idle run is finished."""
        assert self.conn is not None
        s = self.settings
        if not self.is_leader and not self._hold_leadership():
            self._touch()
            self._wait(min(s.poll_s, 1.0))
            return False
        result = self.tick()
        # The rest of the step's round trips come after the tick, off the slot's path: a leader's
        # lock lives with its listen session (checked alive), and the registry row is touched.
        self._hold_leadership()
        self._touch()
        if s.until_idle and not result.still_due and result.schedules == 0:
            return True
        if result.still_due:
            return False
        # Housekeeping between ticks, one small step per due chore, so a slot never waits long;
        # the chores' table is read only once the earliest of them is due, not at every tick.
        if self.chores and time.monotonic() >= self.chores_due:
            stepped = chores.run_due(self.conn, self.chores)
            chore_wait = chores.next_wait(self.conn, self.chores)
            # a chore due but held by another ticker: look again shortly, not in a busy loop
            chore_wait = max(chore_wait if chore_wait is not None else s.poll_s, 0.0 if stepped else 0.1)
            self.chores_due = time.monotonic() + chore_wait
        row = self.conn.execute(
            q("schedule_next_wait"),
            {"now": None, "lookahead": self.lookahead, "margin": settle.CONFIRM_MARGIN},
        ).fetchone()
        wait = row["wait_s"] if row and row["wait_s"] is not None else s.poll_s
        if self.chores and not s.until_idle:
            wait = min(wait, self.chores_due - time.monotonic())
        if s.until_idle and wait > 0:
            return True
        self._wait(max(0.0, min(wait, s.poll_s)))
        return False

    def _touch(self) -> None:
        """Mark this ticker alive in the process registry, at most every 5 s."""
        assert self.conn is not None
        now_mono = time.monotonic()
        if now_mono - self.last_touch > 5:
            process_touch(self.conn, self.settings.ticker_id)
            self.last_touch = now_mono

    def tick(self) -> TickResult:
        assert self.conn is not None
        with telemetry.tick_span() as span:
            result = run_once(
                self.conn,
                batch_size=self.settings.batch_size,
                catchup_limit=self.settings.catchup_limit,
                lookahead=self.lookahead,
                trace_ids=span.ids,
            )
            span.done(result.schedules, result.created, result.skipped)
        # Off the slots' path: the runs created ahead that came due, and the stale ones.
        settled = settle.run_once(self.conn)
        result.still_due = result.still_due or settled.still_stale
        self.ticks += 1
        if result.created or result.skipped:
            logs.event(
                "tick",
                ticker_id=self.settings.ticker_id,
                schedules=result.schedules,
                created=result.created,
                skipped=result.skipped,
                missed=result.missed,
            )
        return result

    def _wait(self, seconds: float) -> None:
        """Sleep up to `seconds` (monotonic), returning early on a NOTIFY (at most one wake-up per
        _NOTIFY_GAP_S, the notifications received meanwhile coalesced) or a stop request."""
        assert self.listen is not None
        end = time.monotonic() + seconds
        while not self.stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            arrived = self.listen.notifies(timeout=min(left, _WAIT_SLICE_S), stop_after=1)
            notified = next(arrived, None) is not None
            arrived.close()  # releases the connection, which the draining below takes again
            if notified:
                too_soon = self._notified_mono + _NOTIFY_GAP_S - time.monotonic()
                if too_soon > 0 and self.stop.wait(min(too_soon, max(0.0, end - time.monotonic()))):
                    return
                for _ in self.listen.notifies(timeout=0):
                    pass  # the ones that arrived meanwhile are this wake-up's too
                self._notified_mono = time.monotonic()
                return
