-- Statements of the operator's tool (fleetctl): health, history, repair, pruning, metrics.

-- name: schedule_health
-- Per schedule, the numbers its health verdict is made of, at a cost in schedules, not in history:
-- the newest success and finished run come from schedule_stats (kept by the tickers' roll-up,
-- fleet.health.rollup) merged with the runs finished since the roll-up's mark minus its margin (through
-- job_runs_finished), so a read is exact at once; dead runs are counted through job_runs_dead. A
-- schedule the roll-up has not covered yet (its first pass still under way) is probed through its
-- primary key, and so is the newest finished run of one whose stats a retry or discard made dirty.
-- The open runs' numbers come from run_open_health; durations are seconds at `now`.
WITH t AS (SELECT %(now)s::timestamptz AS now),
fin AS (
    SELECT r.schedule_name, r.scheduled_for, r.status, r.last_outcome, r.finished_at, r.last_error
    FROM fleet.job_runs r
    WHERE r.status IN ('done', 'dead', 'skipped') AND r.finished_at >= %(since)s
      AND (%(every)s OR r.schedule_name = ANY(%(names)s::text[]))
),
ok AS (
    SELECT DISTINCT ON (schedule_name) schedule_name, scheduled_for, finished_at
    FROM fin WHERE status = 'done'
    ORDER BY schedule_name, scheduled_for DESC
),
fl AS (
    SELECT DISTINCT ON (schedule_name) * FROM fin
    ORDER BY schedule_name, scheduled_for DESC, finished_at DESC
),
dead AS (
    SELECT r.schedule_name, count(*) AS n FROM fleet.job_runs r
    WHERE r.status = 'dead' AND (%(every)s OR r.schedule_name = ANY(%(names)s::text[]))
    GROUP BY 1
),
-- the schedules past the first pass's cursor (all of it: success and finished run), and the dirty
-- ones it covered (their finished run)
unrolled AS (
    SELECT s.name, true AS whole FROM fleet.schedules s
    WHERE NOT %(done)s AND s.name > %(cursor)s
      AND (%(every)s OR s.name = ANY(%(names)s::text[]))
    UNION ALL
    SELECT st.name, false FROM fleet.schedule_stats st
    WHERE st.dirty > 0 AND (%(done)s OR st.name <= %(cursor)s)
      AND (%(every)s OR st.name = ANY(%(names)s::text[]))
),
probe AS (
    SELECT u.name, u.whole, ls.finished_at AS success_at,
           lf.scheduled_for, lf.status, lf.last_outcome, lf.last_error
    FROM unrolled u
    LEFT JOIN LATERAL (
        SELECT r.finished_at FROM fleet.job_runs r
        WHERE u.whole AND r.schedule_name = u.name AND r.status = 'done'
        ORDER BY r.scheduled_for DESC LIMIT 1
    ) ls ON true
    LEFT JOIN LATERAL (
        SELECT r.scheduled_for, r.status, r.last_outcome, r.last_error FROM fleet.job_runs r
        WHERE r.schedule_name = u.name AND r.status IN ('done', 'dead', 'skipped')
        ORDER BY r.scheduled_for DESC LIMIT 1
    ) lf ON true
)
SELECT s.name, s.job, s.job = ANY(%(served)s::text[]) AS job_served, s.enabled, s.paused_at, s.pause_note, s.next_run_at,
       iv.interval_s,
       -- the timing of a cron schedule whose cadence around now is not stored (yet), to compute it
       CASE WHEN iv.interval_s IS NULL THEN s.cron END AS cron,
       CASE WHEN iv.interval_s IS NULL THEN s.timezone END AS timezone,
       CASE WHEN iv.interval_s IS NULL THEN s.start_at END AS start_at,
       CASE WHEN iv.interval_s IS NULL THEN s.dst_repeated END AS dst_repeated,
       CASE WHEN iv.interval_s IS NULL THEN s.dst_missing END AS dst_missing,
       -- the last success (unnamed: the columns are read by position, and the text stays under 4 kB)
       x.success_at,
       -- quiet since the last success, or since the schedule was created, changed, resumed or
       -- first due, whichever is latest; durations in seconds to the millisecond, rounded here
       -- (Python's round() cost more than the rest of a schedule's verdict)
       greatest(0, round(date_part('epoch', t.now - greatest(s.updated_at, x.success_at, s.start_at)) * 1000)
                   / 1000) AS quiet_s,
       round(date_part('epoch', t.now - x.success_at) * 1000) / 1000 AS since_last_success_s,
       CASE WHEN p.name IS NOT NULL THEN p.scheduled_for WHEN x.newer THEN fl.scheduled_for ELSE st.last_slot END
           AS last_slot,
       (CASE WHEN p.name IS NOT NULL THEN p.status WHEN x.newer THEN fl.status ELSE st.last_status END)::text
           AS last_status,
       CASE WHEN p.name IS NOT NULL THEN p.last_outcome WHEN x.newer THEN fl.last_outcome ELSE st.last_outcome END
           AS last_outcome,
       CASE WHEN p.name IS NOT NULL THEN p.last_error WHEN x.newer THEN fl.last_error ELSE st.last_error END
           AS last_error,
       coalesce(d.n, 0)::int,
       s.broken_at, s.broken_error, s.overlap,
       -- a calendar (read in the time zone beside it) ends a schedule; its exclusions keep it quiet
       s.calendar, s.timezone
FROM fleet.schedules s
CROSS JOIN t
LEFT JOIN fleet.schedule_stats st ON st.name = s.name
LEFT JOIN ok ON ok.schedule_name = s.name
LEFT JOIN fl ON fl.schedule_name = s.name
LEFT JOIN dead d ON d.schedule_name = s.name
LEFT JOIN probe p ON p.name = s.name
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.every IS NOT NULL THEN date_part('epoch', s.every)
                WHEN s.cadence_hash IS DISTINCT FROM s.timing_hash OR s.cadence_mid IS NULL THEN NULL
                WHEN t.now >= s.cadence_from AND t.now < s.cadence_mid
                    THEN date_part('epoch', coalesce(s.cadence_gap, s.cadence_mid - s.cadence_from))
                WHEN t.now >= s.cadence_mid AND t.now < s.cadence_until
                    THEN date_part('epoch', s.cadence_until - s.cadence_mid)
           END AS interval_s
) iv
CROSS JOIN LATERAL (
    SELECT CASE WHEN p.whole THEN p.success_at
                WHEN ok.scheduled_for IS NOT NULL
                     AND (st.last_success_slot IS NULL OR ok.scheduled_for >= st.last_success_slot)
                    THEN ok.finished_at
                ELSE st.last_success_at END AS success_at,
           fl.scheduled_for IS NOT NULL
           AND (st.last_slot IS NULL
                OR (fl.scheduled_for, fl.finished_at) >= (st.last_slot, coalesce(st.last_finished_at, '-infinity')))
           AS newer
) x
WHERE %(every)s OR s.name = ANY(%(names)s::text[])
ORDER BY s.name

-- name: health_session
-- For the rest of the transaction: no JIT compilation, instants in UTC. The instant of the read, the
-- jobs live workers serve then, and how far the health roll-up got: its mark minus its margin
-- (`since`, NULL before its first step: no finished run is newer than its stats), whether its first pass is over (`done`) and where that pass is (`cursor`).
-- And the fleet's tickers: how many are live, the one seen last (live or not), how many recorded a
-- crash within `crash_s`, the crashes their rows hold, and the newest crash within `crash_s`.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT set_config('jit', 'off', true), set_config('TimeZone', 'UTC', true), t.now,
       (SELECT coalesce(array_agg(DISTINCT j.job), '{}'::text[])
        FROM fleet.processes p CROSS JOIN LATERAL unnest(p.jobs) AS j(job)
        WHERE p.kind = 'worker' AND p.seen_at > t.now - make_interval(secs => %(stale_s)s)) AS served,
       r.since, r.done, r.cursor,
       (SELECT count(*) FROM fleet.processes p
        WHERE p.kind = 'ticker' AND p.seen_at > t.now - make_interval(secs => %(stale_s)s))::int AS tickers,
       lt.id AS ticker_id, lt.host AS ticker_host, lt.seen_at AS ticker_seen_at,
       (SELECT count(*) FROM fleet.processes p
        WHERE p.kind = 'ticker' AND p.crashed_at > t.now - make_interval(secs => %(crash_s)s))::int AS crashed,
       (SELECT coalesce(sum(p.crashes), 0) FROM fleet.processes p WHERE p.kind = 'ticker')::int AS crashes,
       lc.id AS crash_id, lc.host AS crash_host, lc.crashed_at, lc.crashes AS crash_count, lc.last_error AS crash_error
FROM t
CROSS JOIN (SELECT max(c.mark) - make_interval(secs => %(margin_s)s) AS since,
                   coalesce(bool_or(c.mark IS NOT NULL AND c.cursor IS NULL), false) AS done,
                   coalesce(max(c.cursor), '') AS cursor
            FROM fleet.chores c WHERE c.name = 'health_rollup') r
LEFT JOIN LATERAL (
    SELECT p.id, p.host, p.seen_at FROM fleet.processes p WHERE p.kind = 'ticker'
    ORDER BY p.seen_at DESC, p.id LIMIT 1
) lt ON true
LEFT JOIN LATERAL (
    SELECT p.id, p.host, p.crashed_at, p.crashes, p.last_error FROM fleet.processes p
    WHERE p.kind = 'ticker' AND p.crashed_at > t.now - make_interval(secs => %(crash_s)s)
    ORDER BY p.crashed_at DESC, p.id LIMIT 1
) lc ON true

-- name: run_open_health
-- Per schedule with open runs (through job_runs_open), the open runs' part of its health. Only
-- due pending runs count as pending, backlog or unserved; runs created ahead of their time are
-- waiting, and the earliest slot of those the ticker created is the schedule's next slot. A run
-- pending after a failed attempt, not due yet, waits to retry (RETRYING). The due runs that wait to
-- retry are also counted apart (count, those unserved, earliest slot, and the oldest due without
-- them): while their schedule is paused, they are held, not due (fleet.health.reading).
WITH t AS (SELECT %(now)s::timestamptz AS now)
SELECT r.schedule_name,
       count(*) FILTER (WHERE r.status = 'running')::int AS running,
       count(*) FILTER (WHERE r.status = 'pending' AND r.run_after <= t.now)::int AS due,
       count(*) FILTER (WHERE r.status = 'pending' AND r.run_after > t.now)::int AS waiting,
       round(date_part('epoch', t.now - min(r.run_after) FILTER (WHERE r.status = 'pending' AND r.run_after <= t.now))
             * 1000) / 1000 AS oldest_due_s,
       min(r.scheduled_for) FILTER (WHERE r.status = 'pending' AND r.run_after > t.now
                                      AND r.scheduled_for > t.now AND r.origin = 'schedule') AS ahead,
       -- open runs no live worker can take: due and pending, or running under a lease that ran out
       count(*) FILTER (WHERE ((r.status = 'pending' AND r.run_after <= t.now) OR r.locked_until < t.now)
                          AND NOT (r.job = ANY(%(served)s::text[])))::int AS unserved,
       -- runs waiting out a retry back-off after a failed attempt: the earliest, and its next try
       count(*) FILTER (WHERE r.status = 'pending' AND r.failures > 0 AND r.run_after > t.now)::int AS retrying,
       min(r.scheduled_for) FILTER (WHERE r.status = 'pending' AND r.failures > 0 AND r.run_after > t.now)
           AS retry_slot,
       min(r.run_after) FILTER (WHERE r.status = 'pending' AND r.failures > 0 AND r.run_after > t.now)
           AS retry_at,
       count(*) FILTER (WHERE r.status = 'pending' AND r.failures > 0 AND r.run_after <= t.now)::int AS due_retries,
       count(*) FILTER (WHERE r.status = 'pending' AND r.failures > 0 AND r.run_after <= t.now
                          AND NOT (r.job = ANY(%(served)s::text[])))::int AS due_retries_unserved,
       min(r.scheduled_for) FILTER (WHERE r.status = 'pending' AND r.failures > 0 AND r.run_after <= t.now)
           AS due_retry_slot,
       round(date_part('epoch', t.now - min(r.run_after) FILTER (WHERE r.status = 'pending' AND r.failures = 0
                                                                 AND r.run_after <= t.now))
             * 1000) / 1000 AS oldest_first_due_s
FROM fleet.job_runs r, t
WHERE r.status IN ('pending', 'running')
  AND (%(every)s OR r.schedule_name = ANY(%(names)s::text[]))
GROUP BY r.schedule_name, t.now

-- name: schedule_names
SELECT name FROM fleet.schedules WHERE name = ANY(%(names)s::text[])

-- name: schedule_get
SELECT s.*, t.now AS db_now
FROM fleet.schedules s, (SELECT coalesce(%(now)s::timestamptz, now()) AS now) t
WHERE s.name = %(name)s

-- name: schedule_lock
SELECT s.*, t.now AS db_now
FROM fleet.schedules s, (SELECT coalesce(%(now)s::timestamptz, now()) AS now) t
WHERE s.name = %(name)s
FOR UPDATE OF s

-- name: schedule_pause
UPDATE fleet.schedules
SET paused_at = coalesce(%(now)s::timestamptz, now()), updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s AND paused_at IS NULL
RETURNING paused_at

-- name: schedule_note
-- The operator's note shown beside the schedule's verdict (why it is paused); NULL removes it.
UPDATE fleet.schedules SET pause_note = %(note)s WHERE name = %(name)s
RETURNING pause_note

-- name: schedule_resume
-- The next slot is planned from now by the caller: the paused stretch is not caught up.
UPDATE fleet.schedules
SET paused_at = NULL, next_run_at = %(next_run_at)s, updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s AND paused_at IS NOT NULL
RETURNING next_run_at

-- name: run_list
-- Runs the ticker created ahead of their slot (pending, slot still to come) are left out unless
-- pending runs are asked for: they are the schedule's future, not its history.
SELECT r.*, r.status::text AS status
FROM fleet.job_runs r
WHERE r.schedule_name = %(name)s
  AND (%(status)s::fleet.run_status IS NULL OR r.status = %(status)s::fleet.run_status)
  AND (%(outcome)s::text IS NULL OR r.last_outcome = %(outcome)s)
  AND (%(status)s::fleet.run_status IS NOT NULL
       OR NOT (r.status = 'pending' AND r.scheduled_for > now() AND r.run_after > now()))
ORDER BY r.scheduled_for DESC
LIMIT %(limit)s

-- name: run_list_all
-- The newest runs of every schedule: each schedule's newest first (walking its primary key
-- backwards), then the newest of those, so the work is bounded by schedules times the limit, however
-- many finished runs the table holds.
SELECT x.*
FROM fleet.schedules s
CROSS JOIN LATERAL (
    SELECT r.*, r.status::text AS status
    FROM fleet.job_runs r
    WHERE r.schedule_name = s.name
      AND (%(status)s::fleet.run_status IS NULL OR r.status = %(status)s::fleet.run_status)
      AND (%(outcome)s::text IS NULL OR r.last_outcome = %(outcome)s)
      AND (%(status)s::fleet.run_status IS NOT NULL
           OR NOT (r.status = 'pending' AND r.scheduled_for > now() AND r.run_after > now()))
    ORDER BY r.scheduled_for DESC
    LIMIT %(limit)s
) x
ORDER BY x.scheduled_for DESC, x.schedule_name
LIMIT %(limit)s

-- name: run_get
-- The run, with its schedule's broken mark (`fleetctl show` tells why no new slot comes).
SELECT r.*, r.status::text AS status,
       s.broken_at AS schedule_broken_at, s.broken_error AS schedule_broken_error
FROM fleet.job_runs r
JOIN fleet.schedules s ON s.name = r.schedule_name
WHERE r.schedule_name = %(name)s AND r.scheduled_for = %(slot)s

-- name: attempt_list
SELECT a.* FROM fleet.job_attempts a
WHERE a.schedule_name = %(name)s AND a.scheduled_for = %(slot)s
ORDER BY a.attempt

-- name: process_list
-- Live tickers and workers (seen within the staleness limit), with what each is running now.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT p.id, p.kind, p.host, p.pid, p.jobs, p.started_at, p.seen_at,
       extract(epoch FROM t.now - p.seen_at)::float8 AS seen_s_ago,
       (SELECT count(*) FROM fleet.job_runs r WHERE r.status = 'running' AND r.locked_by = p.id) AS running
FROM fleet.processes p, t
WHERE p.seen_at > t.now - make_interval(secs => %(stale_s)s)
ORDER BY p.kind, p.id

-- name: run_retry
-- Dead runs (one slot, or every dead run of the schedule) become pending and due now, with a fresh
-- retry budget. `attempts` keeps growing (it is the fencing token) and the attempt history stays.
-- A gate still held by a retried slot is released: the run takes it again when it is claimed.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
retried AS (
    UPDATE fleet.job_runs r
    SET status = 'pending', run_after = t.now, failures = 0, finished_at = NULL,
        locked_by = NULL, locked_until = NULL,
        last_outcome = CASE WHEN r.last_outcome = 'discarded' THEN 'dead' ELSE r.last_outcome END
    FROM t
    WHERE r.schedule_name = %(name)s
      AND (%(slot)s::timestamptz IS NULL OR r.scheduled_for = %(slot)s::timestamptz)
      AND (r.status = 'dead'
           OR (%(slot)s::timestamptz IS NOT NULL AND r.status = 'skipped' AND r.last_outcome = 'discarded'))
    RETURNING r.schedule_name, r.scheduled_for
),
ungate AS (
    UPDATE fleet.schedule_gates s SET running_slot = NULL
    FROM retried x
    WHERE s.name = x.schedule_name AND s.running_slot = x.scheduled_for
),
-- the schedule's newest finished run may have changed: health probes it again (fleet.health.rollup)
dirtied AS (
    UPDATE fleet.schedule_stats st SET dirty = st.dirty + 1
    WHERE st.name = %(name)s AND EXISTS (SELECT 1 FROM retried)
)
SELECT scheduled_for FROM retried ORDER BY scheduled_for

-- name: run_discard
-- A dead run acknowledged by an operator becomes 'skipped' with last_outcome 'discarded': it no
-- longer counts as dead, `fleetctl prune` may delete it, its attempts stay until then, and
-- `fleetctl retry` can still bring it back. A gate the slot still holds is released.
WITH discarded AS (
    UPDATE fleet.job_runs r
    SET status = 'skipped', last_outcome = 'discarded',
        last_error = left('discarded by an operator; the run was dead: ' || coalesce(r.last_error, '?'), 4000)
    WHERE r.schedule_name = %(name)s
      AND (%(slot)s::timestamptz IS NULL OR r.scheduled_for = %(slot)s::timestamptz)
      AND r.status = 'dead'
    RETURNING r.schedule_name, r.scheduled_for
),
ungate AS (
    UPDATE fleet.schedule_gates s SET running_slot = NULL
    FROM discarded x
    WHERE s.name = x.schedule_name AND s.running_slot = x.scheduled_for
),
-- the schedule's newest finished run may have changed: health probes it again (fleet.health.rollup)
dirtied AS (
    UPDATE fleet.schedule_stats st SET dirty = st.dirty + 1
    WHERE st.name = %(name)s AND EXISTS (SELECT 1 FROM discarded)
)
SELECT scheduled_for FROM discarded ORDER BY scheduled_for

-- name: run_trigger
-- A run of the schedule now, as its own slot: the database's now() truncated to the second, so a
-- second call within the same second finds the slot taken. Under overlap 'skip' the run queues
-- instead (an operator's run is never dropped for overlap). `args`, when given, replace the
-- schedule's arguments for this run only.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
ins AS (
    INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, origin, run_after)
    SELECT s.name, date_trunc('second', t.now), s.job, coalesce(%(args)s::jsonb, s.args),
           CASE WHEN s.overlap = 'skip' THEN 'queue' ELSE s.overlap END, 'trigger', t.now
    FROM fleet.schedules s, t
    WHERE s.name = %(name)s
    ON CONFLICT DO NOTHING
    RETURNING scheduled_for
)
SELECT date_trunc('second', t.now) AS slot, (SELECT count(*) FROM ins) AS created FROM t

-- name: slot_backfill
-- Past slots that have no row yet, created pending and due now (origin 'backfill'). Under overlap
-- 'skip' they queue, so they run one after the other instead of being skipped.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, origin, run_after)
SELECT s.name, v.slot, s.job, s.args, CASE WHEN s.overlap = 'skip' THEN 'queue' ELSE s.overlap END,
       'backfill', t.now
FROM fleet.schedules s, t, unnest(%(slots)s::timestamptz[]) AS v(slot)
WHERE s.name = %(name)s
ON CONFLICT DO NOTHING
RETURNING scheduled_for

-- name: run_prune_keep
-- What pruning never deletes: per schedule, the newest successful run and the newest finished run,
-- which the health numbers are computed from.
SELECT s.name, d.scheduled_for AS done_slot, f.scheduled_for AS finished_slot
FROM fleet.schedules s
LEFT JOIN LATERAL (
    SELECT r.scheduled_for FROM fleet.job_runs r
    WHERE r.schedule_name = s.name AND r.status = 'done'
    ORDER BY r.scheduled_for DESC LIMIT 1
) d ON true
LEFT JOIN LATERAL (
    SELECT r.scheduled_for FROM fleet.job_runs r
    WHERE r.schedule_name = s.name AND r.status IN ('done', 'dead', 'skipped')
    ORDER BY r.scheduled_for DESC LIMIT 1
) f ON true
WHERE %(schedule)s::text IS NULL OR s.name = %(schedule)s

-- name: run_prune
-- One batch: finished runs (done, skipped, discarded; never an unacknowledged dead run) that
-- finished before the cutoff, oldest first from `after` on, with their attempts. Rows another
-- transaction holds are skipped, never waited for. The runs deleted are counted by what they were.
WITH keep AS (
    SELECT * FROM unnest(%(keep_names)s::text[], %(keep_slots)s::timestamptz[]) AS k(name, slot)
),
batch AS (
    SELECT r.schedule_name, r.scheduled_for, r.finished_at,
           CASE WHEN r.last_outcome = 'discarded' THEN 'discarded' ELSE r.status::text END AS kind
    FROM fleet.job_runs r
    WHERE r.status IN ('done', 'dead', 'skipped') AND r.status <> 'dead'
      AND r.finished_at < %(cutoff)s AND r.finished_at >= %(after)s
      AND (%(schedule)s::text IS NULL OR r.schedule_name = %(schedule)s)
      AND (r.schedule_name, r.scheduled_for) NOT IN (SELECT name, slot FROM keep)
    ORDER BY r.finished_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
attempts AS (
    -- counted here; the trigger job_runs_deleted deletes them, after it reads them for the slot
    -- ledger's outcomes (a run done after a lease ran out)
    SELECT 1 FROM fleet.job_attempts a
    JOIN batch b ON a.schedule_name = b.schedule_name AND a.scheduled_for = b.scheduled_for
),
runs AS (
    DELETE FROM fleet.job_runs r
    USING batch b
    WHERE r.schedule_name = b.schedule_name AND r.scheduled_for = b.scheduled_for
    RETURNING b.finished_at, b.kind
)
SELECT x.*, (SELECT count(*) FROM attempts) AS attempts
FROM (SELECT count(*) AS runs, count(*) FILTER (WHERE kind = 'done') AS done,
             count(*) FILTER (WHERE kind = 'skipped') AS skipped,
             count(*) FILTER (WHERE kind = 'discarded') AS discarded,
             max(finished_at) AS last_finished_at
      FROM runs) x

-- name: run_prune_count
-- What run_prune would delete (the same rows, by what they are, with their attempts), deleting nothing.
WITH keep AS (
    SELECT * FROM unnest(%(keep_names)s::text[], %(keep_slots)s::timestamptz[]) AS k(name, slot)
)
SELECT count(*) AS runs, count(*) FILTER (WHERE r.status = 'done') AS done,
       count(*) FILTER (WHERE r.status = 'skipped' AND r.last_outcome IS DISTINCT FROM 'discarded') AS skipped,
       count(*) FILTER (WHERE r.status = 'skipped' AND r.last_outcome = 'discarded') AS discarded,
       coalesce(sum((SELECT count(*) FROM fleet.job_attempts a
                     WHERE a.schedule_name = r.schedule_name AND a.scheduled_for = r.scheduled_for)), 0)::bigint
           AS attempts
FROM fleet.job_runs r
WHERE r.status IN ('done', 'dead', 'skipped') AND r.status <> 'dead'
  AND r.finished_at < %(cutoff)s
  AND (%(schedule)s::text IS NULL OR r.schedule_name = %(schedule)s)
  AND (r.schedule_name, r.scheduled_for) NOT IN (SELECT name, slot FROM keep)

-- name: run_finished_between
-- Runs that finished in (since, until], for the exporter's counters: their status, the claim
-- latency of their last attempt (start minus the moment it became due), the start lag of their
-- first attempt (start minus the slot's start: its time plus the schedule's spread offset for a
-- scheduled run) and the outcome of each attempt.
SELECT r.schedule_name, r.status::text AS status, r.origin,
       extract(epoch FROM r.started_at - r.run_after)::float8 AS claim_latency_s,
       extract(epoch FROM coalesce(a1.started_at, CASE WHEN r.attempts = 1 THEN r.started_at END)
                          - r.scheduled_for
                          - CASE WHEN r.origin = 'schedule' THEN s.spread_offset ELSE '0' END)::float8
           AS start_lag_s,
       coalesce(h.outcomes, '{}'::text[]) AS outcomes
FROM fleet.job_runs r
JOIN fleet.schedules s ON s.name = r.schedule_name
LEFT JOIN fleet.job_attempts a1
       ON a1.schedule_name = r.schedule_name AND a1.scheduled_for = r.scheduled_for AND a1.attempt = 1
LEFT JOIN LATERAL (
    SELECT array_agg(coalesce(a.outcome, 'unknown')) AS outcomes FROM fleet.job_attempts a
    WHERE a.schedule_name = r.schedule_name AND a.scheduled_for = r.scheduled_for
) h ON true
WHERE r.status IN ('done', 'dead', 'skipped')
  AND r.finished_at > %(since)s AND r.finished_at <= %(until)s

-- name: run_dead_list
-- Dead runs an operator has not retried or discarded yet, oldest first.
SELECT r.schedule_name, r.scheduled_for, r.attempts, r.failures, r.finished_at, r.last_error, r.trace_id
FROM fleet.job_runs r
WHERE r.status = 'dead' AND (cardinality(%(names)s::text[]) = 0 OR r.schedule_name = ANY(%(names)s::text[]))
ORDER BY r.finished_at, r.schedule_name, r.scheduled_for
LIMIT %(limit)s

-- name: schedule_deadlines
-- The schedules that have a deadline, with their timing and since when their slots count (created,
-- changed or resumed): the health read finds the newest slot past its deadline of each.
SELECT s.name, s.deadline, s.enabled, s.paused_at, s.broken_at, s.every, s.cron, s.timezone, s.start_at,
       s.dst_repeated, s.dst_missing, greatest(s.updated_at, s.start_at) AS since
FROM fleet.schedules s
WHERE s.deadline IS NOT NULL AND (%(every)s OR s.name = ANY(%(names)s::text[]))

-- name: run_deadline_missed
-- Of the given slots (one per schedule), those without a successful run: no run, or one that is not done.
SELECT d.name, d.slot
FROM unnest(%(names)s::text[], %(slots)s::timestamptz[]) AS d(name, slot)
LEFT JOIN fleet.job_runs r ON r.schedule_name = d.name AND r.scheduled_for = d.slot
WHERE r.status IS DISTINCT FROM 'done'
