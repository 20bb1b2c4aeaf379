-- A run created ahead of its time (the tickers' lookahead) is a slot planned before anyone knows
-- whether a ticker will be there at its time. It carries start_by, its slot plus its schedule's
-- grace: a worker must start it, or a ticker see it due (and clear start_by, as if it had created
-- the slot on time), by then. One that neither did is a missed slot: claims leave it, and a ticker
-- settles it by the schedule's catch-up policy. start_by is NULL on every other run: each statement
-- that starts a run, or ends it without starting it, clears it.
ALTER TABLE fleet.job_runs ADD COLUMN start_by timestamptz;
ALTER TABLE fleet.job_runs ADD CONSTRAINT job_runs_start_by_finite CHECK (isfinite(start_by)) NOT VALID;
-- The few runs still waiting to be started or seen due: the tickers' wake-up, and the stale ones.
CREATE INDEX job_runs_start_by ON fleet.job_runs (start_by) WHERE start_by IS NOT NULL;
