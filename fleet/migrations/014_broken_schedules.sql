-- A schedule whose timing cannot be evaluated is one schedule's problem, never the fleet's: the
-- ticker that meets the error records it here (one line naming the field), skips the schedule and
-- goes on with the others. `status`, metrics and the dashboard show it as BROKEN. A ticker tries a
-- broken schedule again now and then (an upgraded fleet may evaluate it), and apply clears the mark
-- when it changes the schedule.
ALTER TABLE fleet.schedules
    ADD COLUMN IF NOT EXISTS broken_at timestamptz,
    ADD COLUMN IF NOT EXISTS broken_error text;
