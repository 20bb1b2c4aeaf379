"""fleet: a distributed job scheduler on PostgreSQL that runs each scheduled slot once."""

from typing import TYPE_CHECKING, Any

from fleet.declare import Cron, Every, Retry, Schedule
from fleet.errors import (
    Cancelled,
    DatabaseError,
    DatabaseUnavailable,
    FleetError,
    Permanent,
    RequestError,
    RunStateError,
    SchemaMissing,
    UnknownRun,
    UnknownSchedule,
)
from fleet.jobs import JobContext, job
from fleet.results import Attempt, Run, RunHistory, RunStatus, ScheduleHealth, Triggered

if TYPE_CHECKING:
    from fleet.client import Client


def __getattr__(name: str) -> Any:
    # The client is imported on first use: an application's job module imports `fleet` for
    # `@fleet.job` alone, without the database driver and its settings.
    if name == "Client":
        from fleet.client import Client

        return Client
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")


__all__ = [
    "Attempt",
    "Cancelled",
    "Client",
    "Cron",
    "DatabaseError",
    "DatabaseUnavailable",
    "Every",
    "FleetError",
    "JobContext",
    "Permanent",
    "RequestError",
    "Retry",
    "Run",
    "RunHistory",
    "RunStateError",
    "RunStatus",
    "Schedule",
    "ScheduleHealth",
    "SchemaMissing",
    "Triggered",
    "UnknownRun",
    "UnknownSchedule",
    "job",
]
