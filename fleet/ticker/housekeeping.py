"""The chores a ticker does between ticks (see fleet.chores), from its settings."""

from __future__ import annotations

from fleet.chores import Chore
from fleet.rollup import rollup_chore
from fleet.settings import TickerSettings


def ticker_chores(settings: TickerSettings) -> list[Chore]:
    """The housekeeping chores this ticker takes its turn at: the health roll-up (fleet.rollup)."""
    return [rollup_chore(settings.health_rollup_s)]
