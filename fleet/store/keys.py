"""The names every fleet process shares through the database, defined once: advisory-lock keys and
notification channels. (The SQL files name the channels they notify; a test checks they are these.)"""

from __future__ import annotations

from typing import Final

# Advisory-lock keys: bigint, the ASCII of a short name, so that `pg_locks` shows what holds them.
MIGRATE_LOCK: Final = 0x666C656574  # "fleet": serialises concurrent migrators
APPLY_LOCK: Final = 0x666C6170706C79  # "flapply": serialises applies; tickers and workers never take it
LEADER_LOCK: Final = 0x666C7469636B  # "fltick": the ticker leader's session lock

# Notification channels.
RUNS_CHANNEL: Final = "fleet_runs"  # a run became claimable: workers wake up
SCHEDULES_CHANNEL: Final = "fleet_schedules"  # schedules changed: tickers re-read their next wake-up
