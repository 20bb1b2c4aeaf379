-- Wider cadence windows, and the roll-up reading only the cron schedules whose windows need it.
--
-- cadence_gap: the gap between consecutive slots throughout [cadence_from, cadence_mid), which may
-- now span many slots when their gaps are equal (an hourly cron's window lasts about a day, not an
-- hour); NULL for a window computed before, whose first window is one gap, cadence_mid - cadence_from.
ALTER TABLE fleet.schedules ADD COLUMN IF NOT EXISTS cadence_gap interval;

-- The roll-up reads the cron schedules whose windows end at or before now (or have none) through
-- this index, in the order they expire, instead of filtering every cron schedule at every step.
CREATE INDEX IF NOT EXISTS schedules_cadence_expiry
    ON fleet.schedules ((coalesce(cadence_mid, cadence_until, '-infinity'::timestamptz)))
    WHERE cron IS NOT NULL;

-- ... and those whose windows belong to an older timing (or were never computed) through this one.
CREATE INDEX IF NOT EXISTS schedules_cadence_outdated
    ON fleet.schedules (name)
    WHERE cron IS NOT NULL AND cadence_hash IS DISTINCT FROM timing_hash;
