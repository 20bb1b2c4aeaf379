-- Pending runs are indexed by job, then by when they come due. A worker claims only the jobs it
-- registered: through an index ordered by run_after alone, a claim for jobs that have nothing due
-- read past every due run of other jobs (a worker's async jobs behind a backlog of its sync ones,
-- a pool whose jobs sit behind another pool's backlog) before finding that out. Keyed by job, a
-- claim seeks straight to the first due run of each of its jobs. A run becomes pending when it is
-- created or retried, never on a claim or a finish: the wider key costs the claim path nothing.
DROP INDEX IF EXISTS fleet.job_runs_pending;
CREATE INDEX job_runs_pending ON fleet.job_runs (job, run_after) WHERE status = 'pending';
