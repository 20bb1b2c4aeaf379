"""The few exception types fleet raises; each docstring is what a user is told."""

from __future__ import annotations


class FleetError(Exception):
    """Something went wrong in fleet."""


class ConfigError(FleetError):
    """A setting or flag has an invalid value; the message names it."""


class ScheduleFileError(FleetError):
    """The schedules file is invalid; nothing was changed. One line per problem follows."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class DatabaseUnavailable(FleetError):
    """The database cannot be reached."""


class SchemaOutdated(FleetError):
    """The database's fleet schema is missing or older than this fleet's; run `fleetctl migrate`."""


class Permanent(Exception):  # noqa: N818 - a handler outcome, named for the reader of a job
    """Raised by a job handler: the run failed and retrying cannot help; it goes to `dead` at once."""


class Cancelled(Exception):  # noqa: N818
    """The attempt was cancelled: its lease was lost, it timed out, or the worker is stopping."""
