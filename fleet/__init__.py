"""fleet: a distributed job scheduler on PostgreSQL that runs each scheduled slot once."""

from fleet.declare import Cron, Every, Retry, Schedule
from fleet.errors import Cancelled, Permanent
from fleet.jobs import JobContext, job

__all__ = ["Cancelled", "Cron", "Every", "JobContext", "Permanent", "Retry", "Schedule", "job"]
