-- Per-schedule health without rescanning history: what the newest finished runs were, kept by the
-- tickers' health roll-up (fleet.rollup), and each cron schedule's cadence around now, so that a
-- read of every schedule's health costs O(schedules), not O(runs), and evaluates no cron.

-- The newest success and the newest finished run of each schedule (newest: the latest slot). The
-- roll-up merges in the runs that finished since its mark (fleet.chores, chore 'health_rollup');
-- a read adds the runs that finished after that mark, so it is exact at once. A row outlives the
-- runs it describes: pruning a schedule's history keeps its last success.
CREATE TABLE IF NOT EXISTS fleet.schedule_stats (
    name text PRIMARY KEY REFERENCES fleet.schedules (name) ON DELETE CASCADE,
    last_success_slot timestamptz,
    last_success_at timestamptz,
    last_slot timestamptz,
    last_status fleet.run_status,
    last_outcome text,
    last_finished_at timestamptz,
    last_error text,
    -- Bumped when an operator retries or discards a dead run (the newest finished run may no longer
    -- be one): until the roll-up probes the schedule's runs again, a read probes them itself.
    dirty integer NOT NULL DEFAULT 0
);

-- A cron schedule's cadence around now, in two consecutive windows of slots: the gap between
-- cadence_from and cadence_mid holds from cadence_from until cadence_mid, the gap between
-- cadence_mid and cadence_until from then until cadence_until. The roll-up moves them on once now
-- passes cadence_mid; a read outside both computes the cadence itself. NULL for interval
-- schedules, whose cadence is `every`.
ALTER TABLE fleet.schedules
    ADD COLUMN IF NOT EXISTS cadence_from timestamptz,
    ADD COLUMN IF NOT EXISTS cadence_mid timestamptz,
    ADD COLUMN IF NOT EXISTS cadence_until timestamptz;
-- The schedule's timing_hash when its cadence was computed: a window of an older timing is ignored.
ALTER TABLE fleet.schedules ADD COLUMN IF NOT EXISTS cadence_hash text;
