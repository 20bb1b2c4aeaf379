-- An operator's note on a schedule, given when pausing or resuming it (`fleetctl pause --note`, the
-- dashboard): why it is paused, shown by `fleetctl status` and the dashboard beside the verdict.
ALTER TABLE fleet.schedules ADD COLUMN IF NOT EXISTS pause_note text;
