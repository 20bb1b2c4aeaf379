"""`fleet.Client`: what fleetctl does, as a typed Python API for applications.

An application triggers a run, pauses a schedule or reads health through a Client instead of
running `fleetctl`; fleetctl's own commands are built on it, so both read and change the same rows
with the same statements. Every failure is one of fleet's exception types (`fleet.errors`), never a
driver error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import psycopg

from fleet.admin import audit, repair
from fleet.admin.apply import ApplyResult, apply_specs
from fleet.admin.audit import AuditRow
from fleet.errors import DatabaseError, DatabaseUnavailable, FleetError, RequestError, SchemaMissing
from fleet.health import reading
from fleet.health.ledger import Verification
from fleet.health.reading import DEFAULT_RUNS_LIMIT
from fleet.health.results import Run, RunHistory, RunStatus, ScheduleHealth, Triggered
from fleet.health.verify import DEFAULT_LIMIT, DEFAULT_MAX_WINDOW, DEFAULT_RETENTION, MAX_LIMIT, verify
from fleet.store.db import connect, permission_denied, redact, resolve_url
from fleet.store.migrate import current_version, latest_version
from fleet.timing.schedfile import ScheduleSpec

DEFAULT_APPLICATION_NAME = "fleet-client"

# What a statement on a database without fleet's schema fails with.
_NO_SCHEMA = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedObject)


def database_url(url: str | None) -> str:
    """`url`, else FLEET_DATABASE_URL, else the embedded server of the current directory (the
    same choice as fleetctl's)."""
    return resolve_url(url or os.environ.get("FLEET_DATABASE_URL") or None)


class Client:
    """A connection to a fleet's database and the operations of fleetctl on it.

    Use it as a context manager (or call `close()`): it owns one autocommit connection, opened at
    once (DatabaseUnavailable when that fails) and opened again on the next call after it broke.
    A Client is for one thread at a time; give each thread its own.

    Every change (apply, pause, resume, trigger, retry, discard) records an audit row with the
    database role and `by`: the call's own, else the Client's (`Client(by="alice")`).
    """

    # What a permission error says to grant: changes need fleet_operator, reads fleet_reader.
    needs = "fleet_operator (fleet_reader to read only)"

    def __init__(
        self,
        url: str | None = None,
        *,
        application_name: str = DEFAULT_APPLICATION_NAME,
        by: str | None = None,
    ) -> None:
        """Connect to `url` (a libpq URI); None means FLEET_DATABASE_URL, else the embedded
        server of the current directory. `by` names who makes the changes, in their audit rows
        (at most 100 characters)."""
        self._by = audit.check_by(by)
        self._url = database_url(url)
        self._application_name = application_name
        self._closed = False
        self._conn: psycopg.Connection[Any] | None = connect(self._url, application_name)

    # -- the connection ---------------------------------------------------------------------------

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; the Client cannot be used afterwards. Closing twice is fine."""
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def closed(self) -> bool:
        """True once `close()` was called (or the `with` block ended)."""
        return self._closed

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection (opened again if it broke), with driver errors turned into fleet's."""
        if self._closed:
            raise FleetError("this fleet.Client is closed")
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._url, self._application_name)
        try:
            yield self._conn
        except _NO_SCHEMA as e:
            raise SchemaMissing("the database has no fleet schema; run `fleetctl migrate`") from e
        except psycopg.OperationalError as e:
            raise DatabaseUnavailable(f"{redact(self._url)}: {str(e).strip()}") from e
        except psycopg.Error as e:
            denied = permission_denied(e, self._url, self.needs)
            if denied is not None:
                raise denied from e
            raise DatabaseError(str(e).strip()) from e

    def _who(self, by: str | None) -> str | None:
        return audit.check_by(by) if by is not None else self._by

    # -- schedules ------------------------------------------------------------------------------

    def apply(
        self,
        specs: Sequence[ScheduleSpec],
        prune: bool = False,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> ApplyResult:
        """Make the database's schedules match `specs` (from `fleet.timing.schedfile.load`), all or nothing:
        create and update them, and with `prune` disable the schedules not among them. Each
        schedule changed gets an audit row. Raises SchemaMissing on a database that `fleetctl
        migrate` has not brought up to date."""
        who, note = self._who(by), audit.check_note(note, "note")
        with self._session() as conn:
            have, want = current_version(conn), latest_version()
            if have == 0:
                raise SchemaMissing("the database has no fleet schema; run `fleetctl migrate`")
            if have < want:
                raise SchemaMissing(
                    f"the database's fleet schema is at version {have}, not {want}; run `fleetctl migrate`"
                )
            return apply_specs(conn, list(specs), prune=prune, by=who, note=note)

    def pause(self, schedule: str, note: str | None = None, *, by: str | None = None) -> bool:
        """Stop creating slots for `schedule`; False when it was paused already. The slots that
        come due while it is paused are never created, and those created ahead of their time and
        not due yet are removed. A run waiting to retry is held until the resume; runs already due
        or running still run. `note` (at most 500 characters) says why; `status` shows it."""
        with self._session() as conn:
            return repair.schedule_pause(conn, schedule, note=note, by=self._who(by))

    def resume(self, schedule: str, note: str | None = None, *, by: str | None = None) -> datetime | None:
        """Create slots for `schedule` again; returns its next slot, or None when it was not paused.
        The next slot is planned from now: the paused stretch is not caught up. The pause's note
        is replaced by `note` (cleared without one)."""
        with self._session() as conn:
            return repair.schedule_resume(conn, schedule, note=note, by=self._who(by))

    def status(self, schedules: Sequence[str] | None = None) -> list[ScheduleHealth]:
        """The health of the named schedules (all when None or empty), by name: the numbers and
        verdict of `fleetctl status`. UnknownSchedule names every one that does not exist."""
        if isinstance(schedules, str):
            schedules = [schedules]
        with self._session() as conn:
            return reading.schedule_health(conn, schedules)

    # -- runs -----------------------------------------------------------------------------------

    def trigger(
        self,
        schedule: str,
        args: Mapping[str, Any] | None = None,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> Triggered:
        """Create a run of `schedule` now, as its own slot (the database's now() to the second),
        with `args` instead of the schedule's arguments when given (a JSON object). A second call
        within the same second creates nothing (`created` False). Under overlap `skip` the run
        waits for a run in progress instead of being skipped."""
        with self._session() as conn:
            return repair.run_trigger(conn, schedule, args, by=self._who(by), note=note)

    def retry(
        self, schedule: str, slot: datetime, *, by: str | None = None, note: str | None = None
    ) -> list[datetime]:
        """Make the dead (or discarded) run at `slot` pending and due now, with its retry budget
        restarted and its attempts kept; returns [slot], or [] when it is pending or running already.
        RunStateError when the run is done or skipped."""
        with self._session() as conn:
            return repair.run_retry(conn, schedule, reading.aware(slot, "slot"), by=self._who(by), note=note)

    def retry_dead(self, schedule: str, *, by: str | None = None, note: str | None = None) -> list[datetime]:
        """Retry every dead run of `schedule`; returns their slots, oldest first ([] when none)."""
        with self._session() as conn:
            return repair.run_retry(conn, schedule, None, by=self._who(by), note=note)

    def discard(
        self, schedule: str, slot: datetime, *, by: str | None = None, note: str | None = None
    ) -> list[datetime]:
        """Acknowledge the dead run at `slot` so that its schedule is healthy again: it becomes
        `discarded`, keeping its error and attempts, and `retry` can still bring it back. Returns
        [slot], or [] when it was discarded already; RunStateError when it is not dead."""
        with self._session() as conn:
            return repair.run_discard(
                conn, schedule, reading.aware(slot, "slot"), by=self._who(by), note=note
            )

    def discard_dead(
        self, schedule: str, *, by: str | None = None, note: str | None = None
    ) -> list[datetime]:
        """Discard every dead run of `schedule`; returns their slots, oldest first ([] when none)."""
        with self._session() as conn:
            return repair.run_discard(conn, schedule, None, by=self._who(by), note=note)

    def runs(
        self, schedule: str, status: RunStatus | None = None, limit: int = DEFAULT_RUNS_LIMIT
    ) -> list[Run]:
        """The runs of `schedule`, newest slot first: at most `limit`, only those with `status` if
        given (`discarded` finds the dead runs an operator discarded)."""
        with self._session() as conn:
            return reading.run_list(conn, schedule, status, limit)

    def show(self, schedule: str, slot: datetime) -> RunHistory:
        """The run of `schedule` at `slot` with every attempt of it, the one in flight included.
        UnknownRun when the schedule has no run at that slot."""
        with self._session() as conn:
            return reading.run_history(conn, schedule, slot)

    def audit(
        self,
        schedule: str | None = None,
        since: datetime | None = None,
        limit: int = audit.DEFAULT_LIMIT,
    ) -> list[AuditRow]:
        """Who did what, newest first: the audit rows of `schedule` (with those of applies too
        large to record per schedule), or of every schedule, from `since` on, at most `limit`.
        UnknownSchedule when `schedule` does not exist."""
        since = None if since is None else reading.aware(since, "since")
        with self._session() as conn:
            if schedule is not None:
                reading.schedules_require(conn, [schedule])
            return audit.audit_list(conn, schedule, since, limit)

    # -- the slot ledger ------------------------------------------------------------------------

    def verify(
        self,
        schedules: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        *,
        retention: timedelta | None = DEFAULT_RETENTION,
        max_window: timedelta = DEFAULT_MAX_WINDOW,
        limit: int = DEFAULT_LIMIT,
    ) -> Verification:
        """What became of every slot of the named schedules (every enabled one when None or empty)
        in [since, until], as `fleetctl verify` says it: by default the 24 hours before now, and
        never past now. Each schedule's slots come from its timing alone and are reconciled with
        its runs; `Verification.ok` is False when a slot is missing without a recorded reason.

        `retention` is the tickers' default retention (a schedule's own wins; None: off): slots older
        than it count as past retention, not missing. `limit` bounds the ranges listed per schedule
        (every slot is counted). RequestError for an unknown schedule, a naive datetime, `since`
        after `until` or in the future, or a window longer than `max_window`.
        """
        if isinstance(schedules, str):
            schedules = [schedules]
        since = None if since is None else reading.aware(since, "since")
        until = None if until is None else reading.aware(until, "until")
        if not 1 <= limit <= MAX_LIMIT:
            raise RequestError(f"limit: must be from 1 to {MAX_LIMIT}, got {limit}")
        if max_window <= timedelta(0):
            raise RequestError(f"max_window: must be positive, got {max_window}")
        if retention is not None and retention <= timedelta(0):
            raise RequestError(f"retention: must be positive or None, got {retention}")
        with self._session() as conn:
            return verify(
                conn, schedules, since, until, retention=retention, max_window=max_window, limit=limit
            )
