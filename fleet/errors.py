"""The few exception types fleet raises; each docstring is what a user is told."""

from __future__ import annotations

from datetime import UTC, datetime


class FleetError(Exception):
    """Something went wrong in fleet."""


class UsageError(FleetError):
    """A command-line argument is invalid; the message names it."""


class ConfigError(FleetError):
    """A setting or flag has an invalid value; the message names it."""


class ScheduleFileError(FleetError):
    """The schedules file is invalid; nothing was changed. One line per problem follows."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class DatabaseUnavailable(FleetError):
    """The database cannot be reached."""


class DatabaseError(FleetError):
    """The database refused a statement; the message is the database's own."""


class PermissionDenied(FleetError):
    """The role this process connects as lacks a privilege; the message names the role, the privilege
    and the fleet role to grant it."""


class SchemaMissing(FleetError):
    """The database has no fleet schema, or an older one than this fleet's; run `fleetctl migrate`."""


class RequestError(FleetError):
    """A request names something that does not exist, or asks for what cannot be done; nothing was
    changed. The message says which."""


class UnknownSchedule(RequestError):
    """No schedule has that name; nothing was changed."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"no such schedule: {', '.join(repr(n) for n in names)}")
        self.names = names


class UnknownRun(RequestError):
    """The schedule has no run at that slot; nothing was changed."""

    def __init__(self, schedule: str, slot: datetime, why: str = "") -> None:
        super().__init__(f"schedule {schedule!r} has no run at {_iso(slot)}{why}")
        self.schedule = schedule
        self.slot = slot


class RunStateError(RequestError):
    """The run is not in a state the request applies to (only a dead run can be retried or
    discarded); nothing was changed."""

    def __init__(self, schedule: str, slot: datetime, status: str, action: str) -> None:
        super().__init__(f"{schedule} @ {_iso(slot)} is {status}, not dead: nothing to {action}")
        self.schedule = schedule
        self.slot = slot
        self.status = status


# The name `fleet.store.migrate.check_schema` raises; one type with SchemaMissing.
SchemaOutdated = SchemaMissing


class Permanent(Exception):
    """Raised by a job handler: the run failed and retrying cannot help; it goes to `dead` at once."""


class Cancelled(Exception):
    """The attempt was cancelled: its lease was lost, it timed out, or the worker is stopping."""


def _iso(value: datetime) -> str:
    """An instant as UTC ISO-8601 with a ``Z``, the way slots are named in every message."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
