-- Statements on `schedules`: applying the file, finding due schedules, advancing them.

-- name: schedule_lock_apply
-- Serialises applies among themselves; tickers and workers never take it.
SELECT pg_advisory_xact_lock(%(key)s)

-- name: clock_read
SELECT coalesce(%(now)s::timestamptz, now()) AS now

-- name: schedule_definitions
-- Read without row locks: apply compares, then writes (and so locks) only the rows that changed.
-- The definition columns are written by apply alone, and applies hold schedule_lock_apply.
SELECT name, every, cron, timezone, start_at, dst_repeated, dst_missing, job, args, catchup, max_catchup,
       max_lateness, grace, overlap, timeout, max_attempts, retry_base, retry_cap, retention, deadline,
       spread, calendar, enabled, timing_hash
FROM fleet.schedules
ORDER BY name

-- name: schedule_definitions_named
-- The stored definitions of the named schedules (as schedule_definitions): what a worker compares
-- with the schedules its application's code declares.
SELECT name, every, cron, timezone, start_at, dst_repeated, dst_missing, job, args, catchup, max_catchup,
       max_lateness, grace, overlap, timeout, max_attempts, retry_base, retry_cap, retention, deadline,
       spread, calendar, enabled, timing_hash
FROM fleet.schedules
WHERE name = ANY(%(names)s::text[])

-- name: schedule_insert
-- New schedules, a batch at a time: %(rows)s is a JSON array of objects keyed by column.
INSERT INTO fleet.schedules (name, every, cron, timezone, start_at, dst_repeated, dst_missing, job, args, catchup,
                       max_catchup, max_lateness, grace, overlap, timeout, max_attempts, retry_base, retry_cap,
                       retention, deadline, spread, spread_offset, calendar, next_run_at, timing_hash)
SELECT name, every, cron, timezone, start_at, dst_repeated, dst_missing, job, args, catchup,
       max_catchup, max_lateness, grace, overlap, timeout, max_attempts, retry_base, retry_cap,
       retention, deadline, spread, spread_offset, calendar, next_run_at, timing_hash
FROM jsonb_populate_recordset(NULL::fleet.schedules, %(rows)s::jsonb)

-- name: schedule_update
-- Schedules whose definition changed, a batch at a time (%(rows)s as schedule_insert takes it); a null
-- next_run_at keeps the planned slot.
UPDATE fleet.schedules s
SET every = v.every, cron = v.cron, timezone = v.timezone, start_at = v.start_at,
    dst_repeated = v.dst_repeated, dst_missing = v.dst_missing, job = v.job, args = v.args,
    catchup = v.catchup, max_catchup = v.max_catchup, max_lateness = v.max_lateness, grace = v.grace, overlap = v.overlap,
    timeout = v.timeout, max_attempts = v.max_attempts, retry_base = v.retry_base,
    retry_cap = v.retry_cap, retention = v.retention, deadline = v.deadline, spread = v.spread,
    spread_offset = v.spread_offset, calendar = v.calendar, enabled = true,
    next_run_at = coalesce(v.next_run_at, s.next_run_at), timing_hash = v.timing_hash, updated_at = now(),
    broken_at = NULL, broken_error = NULL
FROM jsonb_populate_recordset(NULL::fleet.schedules, %(rows)s::jsonb) v
WHERE s.name = v.name

-- name: schedule_disable
UPDATE fleet.schedules SET enabled = false, updated_at = now()
WHERE name = ANY(%(names)s::text[]) AND enabled

-- name: schedule_notify
SELECT pg_notify('fleet_schedules', '')

-- name: schedule_due
-- Schedules with a slot to create: due, or within the lookahead (slots created ahead of their time).
-- A broken schedule (its timing could not be evaluated) is tried again `retry_broken` after it broke.
SELECT s.name, s.every, s.cron, s.timezone, s.start_at, s.dst_repeated, s.dst_missing, s.catchup,
       s.max_catchup, s.max_lateness, s.grace, s.spread_offset, s.next_run_at, s.broken_at, s.calendar,
       t.now AS db_now
FROM fleet.schedules s, (SELECT coalesce(%(now)s::timestamptz, now()) AS now) t
WHERE s.enabled AND s.paused_at IS NULL AND s.next_run_at <= t.now + %(lookahead)s::interval
  AND (s.broken_at IS NULL OR s.broken_at <= t.now - %(retry_broken)s::interval)
ORDER BY s.next_run_at
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED

-- name: schedule_advance
-- A schedule advanced is evaluated fine: a broken mark it had goes.
UPDATE fleet.schedules s
SET next_run_at = v.next_run_at, missed_slots = s.missed_slots + v.missed, broken_at = NULL, broken_error = NULL
FROM unnest(%(names)s::text[], %(next_run_ats)s::timestamptz[], %(missed)s::bigint[])
     AS v(name, next_run_at, missed)
WHERE s.name = v.name

-- name: schedule_break
-- Schedules whose timing could not be evaluated: skipped by the tickers until `retry_broken` later
-- (schedule_due), shown BROKEN with the error. next_run_at stays, so nothing is lost meanwhile.
UPDATE fleet.schedules s
SET broken_at = coalesce(%(now)s::timestamptz, now()), broken_error = v.error
FROM unnest(%(names)s::text[], %(errors)s::text[]) AS v(name, error)
WHERE s.name = v.name

-- name: schedule_next_wait
-- Seconds from the database's now() until the ticker's next work, for its sleep: the earliest next
-- slot entering the lookahead, or a run created ahead to confirm (the moment run_confirm_ahead
-- takes it; the run with the earliest start_by comes first, and confirming it confirms any other
-- then due). A broken schedule's next slot is left out (it stays in the past while the schedule is
-- skipped); the ticker's poll brings it back when it is tried again.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT extract(epoch FROM least(
           (SELECT min(next_run_at) FROM fleet.schedules
            WHERE enabled AND paused_at IS NULL AND broken_at IS NULL) - %(lookahead)s::interval,
           (SELECT greatest(r.start_by - %(margin)s::interval, r.scheduled_for + (r.start_by - r.scheduled_for) / 2)
            FROM fleet.job_runs r
            WHERE r.start_by >= t.now AND r.status::text = 'pending'
            ORDER BY r.start_by
            LIMIT 1)
       ) - t.now)::float8 AS wait_s
FROM t

-- name: schedule_retention_page
-- The next schedules of a retention pass, in name order from `after` (included with `inclusive`),
-- at most `limit`: those with a finished run older than their cutoff (the pass's start minus the
-- schedule's own retention, or the fleet's default; one probe of the primary key each), each with
-- its cutoff, and on every row how many schedules the page holds and the last of them. Schedules
-- with nothing to remove are not returned, so a page costs its probes, not a row each.
WITH page AS (
    SELECT s.name, c.cutoff,
           EXISTS (SELECT 1 FROM fleet.job_runs r
                   WHERE r.schedule_name = s.name AND r.scheduled_for < c.cutoff
                     AND r.status IN ('done', 'skipped')) AS expired
    FROM fleet.schedules s
    CROSS JOIN LATERAL (SELECT %(start)s::timestamptz - coalesce(s.retention, %(default)s::interval) AS cutoff) c
    WHERE s.name > %(after)s OR (%(inclusive)s AND s.name = %(after)s)
    ORDER BY s.name
    LIMIT %(limit)s
),
size AS (SELECT count(*) AS schedules, max(name) AS last_name FROM page)
SELECT p.name, p.cutoff, size.schedules, size.last_name
FROM size LEFT JOIN page p ON p.expired
ORDER BY p.name
