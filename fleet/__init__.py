"""fleet: a distributed job scheduler on PostgreSQL that runs each scheduled slot once."""

from __future__ import annotations

from importlib import import_module

# Nothing is imported here but on first use (the typing module too: type checkers read the constant
# by its name): an executable of fleet installs its Ctrl-C handling once this package is loaded.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fleet.admin.audit import AuditRow
    from fleet.client import Client
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
    from fleet.health.ledger import ScheduleLedger, SlotRange, Verification
    from fleet.health.results import Attempt, Run, RunHistory, RunStatus, ScheduleHealth, Triggered
    from fleet.jobs import JobContext, job
    from fleet.timing.window import Collapsed, Window

# The rest is imported on first use: an application's job module imports `fleet` for `@fleet.job`
# alone, without the database driver and its settings, and fleetctl starts without what its command
# does not use.
_LAZY = {
    "AuditRow": "fleet.admin.audit",
    "Client": "fleet.client",
    **dict.fromkeys(
        (
            "Cancelled",
            "DatabaseError",
            "DatabaseUnavailable",
            "FleetError",
            "Permanent",
            "RequestError",
            "RunStateError",
            "SchemaMissing",
            "UnknownRun",
            "UnknownSchedule",
        ),
        "fleet.errors",
    ),
    **dict.fromkeys(("Cron", "Every", "Retry", "Schedule"), "fleet.declare"),
    **dict.fromkeys(("JobContext", "job"), "fleet.jobs"),
    **dict.fromkeys(("ScheduleLedger", "SlotRange", "Verification"), "fleet.health.ledger"),
    **dict.fromkeys(("Collapsed", "Window"), "fleet.timing.window"),
    **dict.fromkeys(
        ("Attempt", "Run", "RunHistory", "RunStatus", "ScheduleHealth", "Triggered"), "fleet.health.results"
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fleet' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Attempt",
    "AuditRow",
    "Cancelled",
    "Client",
    "Collapsed",
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
    "ScheduleLedger",
    "SchemaMissing",
    "SlotRange",
    "Triggered",
    "UnknownRun",
    "UnknownSchedule",
    "Verification",
    "Window",
    "job",
]
