"""The health verdict fleetctl prints: the core's `fleet.health`, under the name fleetctl's modules use."""

from fleet.health import (
    BACKLOG_AFTER_INTERVALS,
    FLEET_VERDICTS,
    LATE_AFTER_INTERVALS,
    SEVERITY,
    UNHEALTHY,
    FleetHealth,
    Health,
    Verdict,
    is_healthy,
    problems,
    verdict,
    verdict_text,
)

__all__ = [
    "BACKLOG_AFTER_INTERVALS",
    "FLEET_VERDICTS",
    "LATE_AFTER_INTERVALS",
    "SEVERITY",
    "UNHEALTHY",
    "FleetHealth",
    "Health",
    "Verdict",
    "is_healthy",
    "problems",
    "verdict",
    "verdict_text",
]
