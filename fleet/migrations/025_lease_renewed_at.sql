-- When a running attempt's lease was last renewed (each heartbeat sets it; a value older than the
-- attempt's claim is an earlier attempt's, so its lease was last taken at its claim). An attempt
-- whose lease ran out keeps in its history when that was: its worker was last heard from then, and
-- from then the run waited for the lease to run out and for a worker to reclaim it.
ALTER TABLE fleet.job_runs ADD COLUMN IF NOT EXISTS renewed_at timestamptz;
ALTER TABLE fleet.job_attempts ADD COLUMN IF NOT EXISTS renewed_at timestamptz;
