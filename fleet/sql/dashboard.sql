-- Statements of the web dashboard (`fleetctl dashboard`). Each reads through an index and is
-- bounded: a limit, a page of slots or the live processes. Health, dead runs, one slot's history,
-- the processes and the repairs reuse fleetctl's statements (ops.sql).

-- name: session_configure
-- Every statement of the dashboard's connections gives up after this long: a page that cannot be
-- read quickly says so rather than holding a connection.
SELECT set_config('statement_timeout', %(ms)s::text, false)

-- name: run_recent_strip
-- The newest runs of each named schedule, newest first, at most `per` each: the overview's strip
-- of recent slots. One backward walk of the primary key per schedule. Runs the ticker created
-- ahead of their slot are the schedule's future: left out.
SELECT s.name, r.scheduled_for, r.status::text AS status, r.last_outcome, r.attempts, r.failures
FROM unnest(%(names)s::text[]) AS s(name)
CROSS JOIN LATERAL (
    SELECT r.scheduled_for, r.status, r.last_outcome, r.attempts, r.failures FROM fleet.job_runs r
    WHERE r.schedule_name = s.name
      AND NOT (r.status = 'pending' AND r.scheduled_for > now() AND r.run_after > now())
    ORDER BY r.scheduled_for DESC
    LIMIT %(per)s
) r
ORDER BY s.name, r.scheduled_for DESC

-- name: run_page
-- One page of a schedule's runs, newest slot first, before `before` (keyset paging; NULL: the newest).
-- Runs the ticker created ahead of their slot are left out, as in run_recent_strip.
SELECT r.schedule_name, r.scheduled_for, r.status::text AS status, r.origin, r.args, r.attempts,
       r.failures, r.run_after, r.started_at, r.finished_at, r.locked_by, r.locked_host, r.locked_pid,
       r.locked_until, r.last_outcome, r.last_error, r.trace_id, r.span_id
FROM fleet.job_runs r
WHERE r.schedule_name = %(name)s
  AND NOT (r.status = 'pending' AND r.scheduled_for > now() AND r.run_after > now())
  AND (%(before)s::timestamptz IS NULL OR r.scheduled_for < %(before)s::timestamptz)
ORDER BY r.scheduled_for DESC
LIMIT %(limit)s

-- name: attempt_range
-- The ended attempts of a schedule's slots from `first` to `last` (a page of run_page), at most `limit`.
SELECT a.schedule_name, a.scheduled_for, a.attempt, a.worker_id, a.host, a.pid, a.started_at,
       a.finished_at, a.outcome, a.error, a.trace_id, a.span_id
FROM fleet.job_attempts a
WHERE a.schedule_name = %(name)s AND a.scheduled_for >= %(first)s AND a.scheduled_for <= %(last)s
ORDER BY a.scheduled_for, a.attempt
LIMIT %(limit)s

-- name: attempt_recent
-- A schedule's newest ended attempts, at most `limit`, for its plots of lag and duration.
SELECT a.scheduled_for, a.attempt, a.started_at, a.finished_at, a.outcome
FROM fleet.job_attempts a
WHERE a.schedule_name = %(name)s
ORDER BY a.scheduled_for DESC, a.attempt DESC
LIMIT %(limit)s

-- name: process_seen
-- When each named process registered and was last seen (a row ages out only when it stops):
-- a worker seen after it lost a lease was alive meanwhile, its late writes fenced.
SELECT p.id, p.started_at, p.seen_at FROM fleet.processes p WHERE p.id = ANY(%(ids)s::text[])

-- name: process_runs
-- The runs the named processes hold now, oldest claim first, at most `limit`.
SELECT r.locked_by, r.schedule_name, r.scheduled_for, r.attempts, r.started_at, r.locked_until
FROM fleet.job_runs r
WHERE r.status = 'running' AND r.locked_by = ANY(%(ids)s::text[])
ORDER BY r.locked_by, r.started_at
LIMIT %(limit)s
