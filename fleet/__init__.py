"""fleet: a distributed job scheduler on PostgreSQL that runs each scheduled slot once."""

from fleet.client import Client
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

__all__ = [
    "Attempt",
    "Cancelled",
    "Client",
    "DatabaseError",
    "DatabaseUnavailable",
    "FleetError",
    "JobContext",
    "Permanent",
    "RequestError",
    "Run",
    "RunHistory",
    "RunStateError",
    "RunStatus",
    "ScheduleHealth",
    "SchemaMissing",
    "Triggered",
    "UnknownRun",
    "UnknownSchedule",
    "job",
]
