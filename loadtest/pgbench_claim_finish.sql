-- The classic queue cycle on fleet.job_runs: claim up to :batch due rows with SKIP LOCKED under a lease in
-- one transaction, then finish them in a second one (two commits per batch).
-- pgbench -n -M prepared -D batch=100 -f pgbench_claim_finish.sql; jobs/s = tps * batch.
-- The claim takes one job's due runs, as a worker's does (the pending index is by job, then run_after).
BEGIN;
WITH c AS (
    SELECT schedule_name, scheduled_for
    FROM fleet.job_runs
    WHERE status = 'pending' AND job = 'bench.noop' AND run_after <= now()
    ORDER BY run_after
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
UPDATE fleet.job_runs r
SET status = 'running', attempts = r.attempts + 1, locked_pid = :client_id,
    locked_until = now() + interval '60 seconds', started_at = now()
FROM c
WHERE r.schedule_name = c.schedule_name AND r.scheduled_for = c.scheduled_for;
COMMIT;
UPDATE fleet.job_runs
SET status = 'done', finished_at = now(), locked_pid = NULL, locked_until = NULL
WHERE status = 'running' AND locked_pid = :client_id;
