-- Named statements of the load test: the job's writes, fault bookkeeping, the drain, the audit.

-- name: execution_start
-- A handler start, entered `since_entry_s` before this statement was sent; `applied` says whether
-- this slot's effect is already in the ledger.
INSERT INTO loadtest_executions
    (idempotency_key, schedule_name, scheduled_for, attempt, worker_id, pid, started_at)
VALUES (%(key)s, %(schedule)s, %(slot)s, %(attempt)s, %(worker)s, %(pid)s,
        clock_timestamp() - make_interval(secs => %(since_entry_s)s))
RETURNING id, EXISTS (SELECT 1 FROM loadtest_ledger_keys WHERE idempotency_key = %(key)s) AS applied

-- name: execution_end
UPDATE loadtest_executions SET outcome = %(outcome)s, finished_at = clock_timestamp() WHERE id = %(id)s

-- name: effect_apply
-- The side effect, once per idempotency key; records on the execution whether it applied or found it.
WITH guard AS (
    INSERT INTO loadtest_ledger_keys (idempotency_key) VALUES (%(key)s)
    ON CONFLICT DO NOTHING
    RETURNING idempotency_key
),
effect AS (
    INSERT INTO loadtest_ledger (idempotency_key, schedule_name, scheduled_for, attempt, worker_id)
    SELECT g.idempotency_key, %(schedule)s, %(slot)s, %(attempt)s, %(worker)s FROM guard g
    RETURNING id
)
UPDATE loadtest_executions
SET outcome = CASE WHEN EXISTS (SELECT 1 FROM effect) THEN 'applied' ELSE 'already' END,
    finished_at = clock_timestamp()
WHERE id = %(id)s
RETURNING outcome

-- name: effect_apply_unguarded
-- The same effect written without the idempotency key (--unsafe-effects): what a handler that
-- ignores the key does. Under at-least-once delivery it doubles effects, and the audit must say so.
WITH effect AS (
    INSERT INTO loadtest_ledger (idempotency_key, schedule_name, scheduled_for, attempt, worker_id)
    VALUES (%(key)s, %(schedule)s, %(slot)s, %(attempt)s, %(worker)s)
    RETURNING id
)
UPDATE loadtest_executions SET outcome = 'applied', finished_at = clock_timestamp()
WHERE id = %(id)s
RETURNING outcome

-- name: runs_held
-- The runs a worker holds, with the database's clock.
SELECT schedule_name, scheduled_for, attempts, clock_timestamp() AS at
FROM fleet.job_runs
WHERE locked_by = %(worker)s AND status = 'running'

-- name: runs_held_by_workers
SELECT locked_by AS worker_id, count(*) AS n
FROM fleet.job_runs
WHERE status = 'running' AND locked_until > now()
GROUP BY locked_by

-- name: processes_ready
-- How many of the given tickers and workers have registered: they are connected and about to work.
SELECT count(*) AS n FROM fleet.processes WHERE id = ANY(%(ids)s::text[])

-- name: db_clock
SELECT clock_timestamp() AS at

-- name: fault_insert
INSERT INTO loadtest_faults (kind, target, pid, at, ended_at, held, detail)
VALUES (%(kind)s, %(target)s, %(pid)s, %(at)s, %(ended_at)s, %(held)s, %(detail)s)

-- name: meta_insert
INSERT INTO loadtest_meta (id, settings, window_start) VALUES (1, %(settings)s, %(window_start)s)

-- name: meta_window_end
UPDATE loadtest_meta SET window_end = clock_timestamp() WHERE id = 1 RETURNING window_end

-- name: meta_drained
UPDATE loadtest_meta SET drained_at = clock_timestamp(), drain_note = %(note)s WHERE id = 1

-- name: process_peak
INSERT INTO loadtest_processes (name, pid, kind, peak_rss_kb) VALUES (%(name)s, %(pid)s, %(kind)s, %(kb)s)
ON CONFLICT (name, pid) DO UPDATE SET peak_rss_kb = greatest(loadtest_processes.peak_rss_kb, excluded.peak_rss_kb)

-- name: drain_behind
-- Load schedules whose slots up to the window's end are not all materialised yet.
SELECT count(*) AS n FROM fleet.schedules
WHERE job = %(job)s AND enabled AND next_run_at <= %(window_end)s

-- name: drain_open
SELECT count(*) AS n FROM fleet.job_runs WHERE job = %(job)s AND status IN ('pending', 'running')

-- name: schedules_disable
UPDATE fleet.schedules SET enabled = false, updated_at = now() WHERE job = %(job)s AND enabled
RETURNING name

-- name: audit_meta
SELECT settings, window_start, window_end, drained_at, drain_note FROM loadtest_meta WHERE id = 1

-- name: audit_schedules
SELECT name, every, cron, timezone, start_at, dst_repeated, dst_missing, catchup, overlap, max_lateness,
       max_attempts, args
FROM fleet.schedules WHERE job = %(job)s ORDER BY name

-- name: audit_runs
SELECT schedule_name, scheduled_for, status::text AS status, attempts, failures, last_error, finished_at
FROM fleet.job_runs WHERE job = %(job)s

-- name: audit_attempts
SELECT a.schedule_name, a.scheduled_for, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome
FROM fleet.job_attempts a JOIN fleet.job_runs r USING (schedule_name, scheduled_for)
WHERE r.job = %(job)s

-- name: audit_ledger
SELECT idempotency_key, schedule_name, scheduled_for, count(*) AS n
FROM loadtest_ledger GROUP BY idempotency_key, schedule_name, scheduled_for

-- name: audit_executions
SELECT idempotency_key, schedule_name, scheduled_for, attempt, worker_id, pid, started_at, finished_at, outcome
FROM loadtest_executions ORDER BY started_at, id

-- name: audit_faults
SELECT id, kind, target, pid, at, ended_at, held, detail FROM loadtest_faults ORDER BY at, id

-- name: audit_processes
SELECT name, pid, kind, peak_rss_kb FROM loadtest_processes ORDER BY kind, name, pid
