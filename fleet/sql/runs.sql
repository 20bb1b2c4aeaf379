-- Statements on `job_runs` and `job_attempts`: materialising slots, claiming, heartbeats, finishing.

-- name: slot_materialize
INSERT INTO job_runs (schedule_name, scheduled_for, job, args, overlap, origin, status, run_after, finished_at,
                      last_error, created_trace_id, created_span_id)
SELECT v.name, v.slot, s.job, s.args, s.overlap, %(origin)s, v.status::fleet_run_status, v.slot,
       CASE WHEN v.status = 'skipped' THEN coalesce(%(now)b::timestamptz, now()) END, v.reason,
       %(trace_id)s, %(span_id)s
FROM unnest(%(names)b::text[], %(slots)b::timestamptz[], %(statuses)b::text[], %(reasons)b::text[])
     AS v(name, slot, status, reason)
JOIN schedules s ON s.name = v.name
ON CONFLICT DO NOTHING
RETURNING schedule_name, scheduled_for, status::text AS status

-- name: run_notify
SELECT pg_notify('fleet_runs', '')

-- name: run_claim
-- Claim due runs: pending and due, or running with an expired lease, by one path. Runs of a
-- schedule whose overlap is not 'allow' must also take the schedule's gate (schedules.running_slot);
-- a fresh run that finds the gate held by another run is recorded 'skipped' under overlap 'skip'
-- and left pending under 'queue'.
WITH t AS (SELECT coalesce(%(now)b::timestamptz, now()) AS now),
expired AS (
    SELECT r.schedule_name, r.scheduled_for
    FROM job_runs r
    WHERE r.status = 'running' AND r.locked_until < coalesce(%(now)b::timestamptz, now())
      AND r.job = ANY(%(jobs)b::text[])
    ORDER BY r.locked_until
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
due AS (
    SELECT r.schedule_name, r.scheduled_for
    FROM job_runs r
    WHERE r.status = 'pending' AND r.run_after <= coalesce(%(now)b::timestamptz, now())
      AND r.job = ANY(%(jobs)b::text[])
      AND (r.overlap <> 'queue' OR NOT EXISTS (
              SELECT 1 FROM job_runs e
              WHERE e.schedule_name = r.schedule_name AND e.scheduled_for < r.scheduled_for
                AND e.status IN ('pending', 'running')))
    ORDER BY r.run_after
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
cand AS (
    SELECT r.schedule_name, r.scheduled_for, r.overlap, r.status AS prev_status, r.attempts AS prev_attempts,
           r.trace_id AS prev_trace_id, r.span_id AS prev_span_id, r.last_outcome AS prev_outcome,
           r.locked_by AS prev_worker, r.locked_host AS prev_host, r.locked_pid AS prev_pid,
           r.started_at AS prev_started_at, r.locked_until AS prev_locked_until
    FROM job_runs r
    JOIN (SELECT * FROM expired UNION ALL SELECT * FROM due LIMIT %(limit)s) c
      ON r.schedule_name = c.schedule_name AND r.scheduled_for = c.scheduled_for
),
gate AS (
    UPDATE schedules s SET running_slot = c.scheduled_for
    FROM (SELECT DISTINCT ON (c.schedule_name) c.schedule_name, c.scheduled_for
          FROM cand c JOIN schedules s2 ON s2.name = c.schedule_name
          WHERE c.overlap <> 'allow'
          ORDER BY c.schedule_name, (c.scheduled_for = s2.running_slot) IS TRUE DESC, c.scheduled_for) c
    WHERE s.name = c.schedule_name AND (s.running_slot IS NULL OR s.running_slot = c.scheduled_for)
    RETURNING s.name, s.running_slot
),
claimed AS (
    UPDATE job_runs r
    SET status = 'running',
        attempts = r.attempts + 1,
        -- a lease that ran out spent a try: the attempt crashed or stalled
        failures = r.failures + CASE WHEN c.prev_status = 'running' THEN 1 ELSE 0 END,
        last_outcome = CASE WHEN c.prev_status = 'running' THEN 'lease_expired' ELSE r.last_outcome END,
        locked_by = %(worker)s,
        locked_host = %(host)s,
        locked_pid = %(pid)s,
        locked_until = t.now + make_interval(secs => %(lease_s)s),
        started_at = t.now,
        trace_id = encode(uuid_send(gen_random_uuid()), 'hex'),
        span_id = substr(encode(uuid_send(gen_random_uuid()), 'hex'), 1, 16)
    FROM cand c, t, schedules s
    WHERE r.schedule_name = c.schedule_name AND r.scheduled_for = c.scheduled_for AND s.name = r.schedule_name
      AND (c.overlap = 'allow'
           OR EXISTS (SELECT 1 FROM gate g WHERE g.name = c.schedule_name AND g.running_slot = c.scheduled_for))
    RETURNING r.schedule_name, r.scheduled_for, r.job, r.args, r.attempts, r.failures, r.origin,
              r.started_at, r.locked_until, r.trace_id, r.span_id, r.created_trace_id, r.created_span_id,
              c.prev_status, c.prev_trace_id, c.prev_span_id, c.prev_outcome, c.prev_worker,
              c.prev_started_at, c.prev_locked_until, s.timeout, s.max_attempts, s.retry_base, s.retry_cap
),
skipped AS (
    UPDATE job_runs r
    SET status = 'skipped', finished_at = t.now, last_outcome = 'skipped',
        last_error = 'overlap: an earlier run of this schedule was still in progress'
    FROM cand c, t
    WHERE r.schedule_name = c.schedule_name AND r.scheduled_for = c.scheduled_for
      AND c.overlap = 'skip' AND c.prev_status = 'pending' AND c.prev_attempts = 0
      AND NOT EXISTS (SELECT 1 FROM gate g WHERE g.name = c.schedule_name AND g.running_slot = c.scheduled_for)
    RETURNING r.schedule_name, r.scheduled_for
),
lost AS (
    -- The previous attempt of a reclaimed run died with its worker: record it from the row.
    INSERT INTO job_attempts (schedule_name, scheduled_for, attempt, worker_id, host, pid, started_at,
                              finished_at, outcome, error, trace_id, span_id)
    SELECT c.schedule_name, c.scheduled_for, c.prev_attempts, coalesce(c.prev_worker, '?'), c.prev_host,
           c.prev_pid, coalesce(c.prev_started_at, t.now), t.now, 'lease_expired', 'lease expired',
           c.prev_trace_id, c.prev_span_id
    FROM cand c, t
    WHERE c.prev_status = 'running' AND c.prev_attempts > 0
    ON CONFLICT DO NOTHING
)
SELECT c.*, t.now AS db_now, NULL::text AS skipped_reason FROM claimed c, t
UNION ALL
SELECT k.schedule_name, k.scheduled_for, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, t.now, 'overlap'
FROM skipped k, t

-- name: run_heartbeat
-- Renew the leases of a worker's runs; a run missing from the result was taken over (fenced out).
UPDATE job_runs r
SET locked_until = coalesce(%(now)b::timestamptz, now()) + make_interval(secs => %(lease_s)s)
FROM unnest(%(names)b::text[], %(slots)b::timestamptz[], %(attempts)b::integer[]) AS v(name, slot, attempt)
WHERE r.schedule_name = v.name AND r.scheduled_for = v.slot AND r.attempts = v.attempt
  AND r.status = 'running'
RETURNING r.schedule_name, r.scheduled_for

-- name: run_finish
-- Record attempts' outcomes, fenced on the attempt number: a stale worker's write matches nothing.
-- status: 'done' | 'dead' | 'pending' (retry after delay_s, or handed back with delay 0).
WITH t AS (SELECT coalesce(%(now)b::timestamptz, now()) AS now),
v AS (
    SELECT * FROM unnest(%(names)b::text[], %(slots)b::timestamptz[], %(attempts)b::integer[],
                         %(statuses)b::text[], %(outcomes)b::text[], %(errors)b::text[],
                         %(delays)b::float8[], %(spent)b::integer[], %(started)b::timestamptz[],
                         %(trace_ids)b::text[], %(span_ids)b::text[])
        AS v(name, slot, attempt, status, outcome, error, delay_s, spent, started_at, trace_id, span_id)
),
fin AS (
    UPDATE job_runs r
    SET status = v.status::fleet_run_status,
        run_after = CASE WHEN v.status = 'pending' THEN t.now + make_interval(secs => v.delay_s)
                         ELSE r.run_after END,
        locked_by = NULL,
        locked_host = NULL,
        locked_pid = NULL,
        locked_until = NULL,
        finished_at = CASE WHEN v.status IN ('done', 'dead') THEN t.now END,
        last_error = CASE WHEN v.status = 'done' THEN NULL ELSE coalesce(v.error, r.last_error) END,
        last_outcome = v.outcome,
        failures = r.failures + v.spent
    FROM v, t
    WHERE r.schedule_name = v.name AND r.scheduled_for = v.slot AND r.attempts = v.attempt
      AND r.status = 'running'
    RETURNING r.schedule_name, r.scheduled_for, r.attempts, r.status::text AS status, r.overlap
),
history AS (
    INSERT INTO job_attempts (schedule_name, scheduled_for, attempt, worker_id, host, pid, started_at,
                              finished_at, outcome, error, trace_id, span_id)
    SELECT f.schedule_name, f.scheduled_for, f.attempts, %(worker)s, %(host)s, %(pid)s, v.started_at, t.now,
           v.outcome, v.error, v.trace_id, v.span_id
    FROM fin f, v, t
    WHERE f.schedule_name = v.name AND f.scheduled_for = v.slot
    ON CONFLICT DO NOTHING
),
ungate AS (
    UPDATE schedules s SET running_slot = NULL
    FROM fin f
    WHERE f.status IN ('done', 'dead') AND f.overlap <> 'allow'
      AND s.name = f.schedule_name AND s.running_slot = f.scheduled_for
    RETURNING s.name
)
-- Wake idle workers when a run became claimable: a gate was freed, a run was handed back, or a
-- retry was planned (they recompute how long to sleep).
SELECT f.schedule_name, f.scheduled_for, f.status,
       (SELECT count(pg_notify('fleet_runs', ''))
        FROM (SELECT 1 FROM ungate UNION ALL SELECT 1 FROM fin WHERE status = 'pending' LIMIT 1) u) AS woke
FROM fin f

-- name: run_next_wait
-- Seconds from now() to the earliest moment a run becomes claimable (due, or lease expiring).
SELECT extract(epoch FROM least(
           (SELECT min(run_after) FROM job_runs WHERE status = 'pending' AND job = ANY(%(jobs)b::text[])),
           (SELECT min(locked_until) FROM job_runs WHERE status = 'running' AND job = ANY(%(jobs)b::text[])))
       - coalesce(%(now)b::timestamptz, now()))::float8 AS wait_s
