"""The chores a ticker does between ticks (see fleet.store.chores), from its settings."""

from __future__ import annotations

from fleet.health.rollup import rollup_chore
from fleet.process.settings import TickerSettings
from fleet.store.chores import Chore
from fleet.ticker.retention import retention_chore


def ticker_chores(settings: TickerSettings) -> list[Chore]:
    """The housekeeping chores this ticker takes its turn at: the health roll-up (fleet.health.rollup) and,
    unless turned off, built-in retention (fleet.ticker.retention)."""
    found = [rollup_chore(settings.health_rollup_s)]
    if settings.retention is not None:
        found.append(
            retention_chore(
                settings.retention,
                settings.retention_every_s,
                settings.retention_batch,
                settings.ticker_id,
                settings.ledger_retention,
            )
        )
    return found
