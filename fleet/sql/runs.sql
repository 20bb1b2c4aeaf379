-- Statements on `job_runs` and `job_attempts`: materialising slots, claiming, heartbeats, finishing.

-- name: slot_materialize
-- A slot created ahead of its time has its start_by (slot + spread offset + grace); the others NULL.
-- A run becomes claimable at its slot plus its schedule's spread offset; its identity stays the
-- slot. `windows` holds the window a run is created with (the slots folded into it), or NULL.
INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, origin, status, run_after, finished_at,
                      last_error, created_trace_id, created_span_id, start_by, run_window)
SELECT v.name, v.slot, s.job, s.args, s.overlap, %(origin)s, v.status::fleet.run_status, v.slot + s.spread_offset,
       CASE WHEN v.status = 'skipped' THEN coalesce(%(now)b::timestamptz, now()) END, v.reason,
       %(trace_id)s, %(span_id)s, v.start_by, v.win::jsonb
FROM unnest(%(names)b::text[], %(slots)b::timestamptz[], %(statuses)b::text[], %(reasons)b::text[],
            %(start_bys)b::timestamptz[], %(windows)b::text[])
     AS v(name, slot, status, reason, start_by, win)
JOIN fleet.schedules s ON s.name = v.name
ON CONFLICT DO NOTHING
RETURNING schedule_name, scheduled_for, status::text AS status

-- name: slot_withdraw
-- The named schedules' runs created ahead of their time and not due yet (origin 'schedule', pending,
-- never attempted, slot still to come; or recorded skipped ahead by the schedule's calendar) are
-- deleted: a paused or disabled schedule starts none, a changed one has them created anew with its
-- new definition. With `rewind`, next_run_at goes back
-- to the earliest slot deleted, so that it stays the first slot not created. Runs due or running are
-- never touched. The caller locks the schedules' rows first, in the same transaction: a ticker
-- creates runs only under that lock, so this statement sees every run a ticker committed.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
gone AS (
    DELETE FROM fleet.job_runs r
    USING t
    WHERE r.schedule_name = ANY(%(names)s::text[]) AND r.origin = 'schedule' AND r.attempts = 0
      AND r.scheduled_for > t.now
      AND (r.status = 'pending' OR (r.status = 'skipped' AND r.last_error LIKE 'calendar:%%'))
    RETURNING r.schedule_name, r.scheduled_for
),
first AS (SELECT schedule_name, min(scheduled_for) AS slot, count(*) AS n FROM gone GROUP BY schedule_name),
rewound AS (
    UPDATE fleet.schedules s SET next_run_at = least(s.next_run_at, f.slot)
    FROM first f
    WHERE %(rewind)s AND s.name = f.schedule_name
)
SELECT schedule_name AS name, slot AS first_slot, n AS withdrawn FROM first ORDER BY schedule_name

-- name: run_notify
SELECT pg_notify('fleet_runs', '')

-- name: round_configure
-- Planner settings for one worker round (finish + claim), local to its transaction so that they
-- never leak through a transaction-pooling proxy. The round's statements reach a few rows each
-- through an index, and must keep doing so however stale the statistics: planned after a backlog
-- appeared but before the next analyze, a claim would read and sort every open run (through a
-- bitmap scan, or another partial index than the one in its order) and a finish would scan the
-- table for its hundred keys, every round. With sequential and bitmap scans and sorts off, the
-- lease and pending indexes read in order and the primary-key probes are the plans whatever the
-- statistics say. The generic plan of a prepared round statement is kept rather than planned anew
-- each time, and JIT compilation only costs statements this small.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('jit', 'off', true)

-- name: run_claim
-- Claim due runs: pending and due, or running with an expired lease, by one path. A run created
-- ahead of its time that is past its start_by is a missed slot, left for a ticker to settle. A run
-- waiting to retry after a failed attempt is held while its schedule is paused (a scalar subquery:
-- one probe of the schedule's key for such a run only, never a hashed read of every schedule). Runs of a
-- schedule whose overlap is not 'allow' must also take the schedule's gate (fleet.schedule_gates,
-- a row created by the first claim that takes it); a fresh run that finds the gate held by another
-- run is recorded 'skipped' under overlap 'skip' and left pending under 'queue'. Claimers of two
-- runs of one schedule serialise on the gate row and the second re-checks it under the lock.
--
-- Written for a plan that stays flat: each candidate is read once, locked, with the values it had
-- before (tracing links and a lost attempt's history need them); the updates reach the locked
-- rows by their tuple id (`t`, a Tid Scan: no walk down the primary key), which cannot change
-- while this transaction holds their locks, through a narrow subquery (OFFSET 0 keeps it narrow:
-- an UPDATE copies each joined row of a subquery whole); the previous status is the row's own
-- value in SET, read under the lock.
-- The new attempt's trace and span ids are taken from `ids`, 24 random bytes per claimable row
-- from the worker (the database's random UUIDs cost more and have fixed version bits).
-- A run is skipped when it is not among the gates taken: NOT IN over the gate's keys (never NULL)
-- is one hashed lookup per run, where NOT EXISTS was planned as a nested loop over both CTEs.
-- The result has the columns of `out` and the schedule's, and 'overlap' in skipped_reason for a
-- run recorded skipped (then only its key is set). Empty args come back as NULL: nothing to decode.
-- Due runs are found job by job, in the order of `jobs`, each job's oldest first, through the
-- index of pending runs by (job, run_after): a claim seeks to its own jobs' due runs and never
-- reads past another job's backlog. The outer LIMIT stops the walk (and the locking) as soon as
-- the batch is full; the worker turns its list of jobs round from one claim to the next, so that
-- a backlog of one of its jobs does not hold its other jobs back.
-- `now` has no cast (coalesce with now() gives it its type), and the locking clauses need not name
-- their only table: the statement stays under psycopg's 4 kB cache limit.
-- The claim leaves the run's window as stored: the previous success is looked up only when a
-- handler reads it (run_window_look), since that probe cost more than the rest of the claim's work
-- on the run.
WITH expired AS (
    SELECT r.ctid AS t, r.*
    FROM fleet.job_runs r
    WHERE r.status = 'running' AND r.locked_until < coalesce(%(now)b, now())
      AND r.job = ANY(%(jobs)b::text[])
    ORDER BY r.locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT d.*
    FROM unnest(%(jobs)b::text[]) j, LATERAL (
        SELECT r.ctid AS t, r.*
        FROM fleet.job_runs r
        WHERE r.status = 'pending' AND r.job = j AND r.run_after <= coalesce(%(now)b, now())
          AND (r.start_by IS NULL OR r.start_by >= coalesce(%(now)b, now()))
          AND (r.failures = 0
               OR (SELECT s.paused_at FROM fleet.schedules s WHERE s.name = r.schedule_name) IS NULL)
          AND (r.overlap <> 'queue' OR NOT EXISTS (
                  SELECT 1 FROM fleet.job_runs e
                  WHERE e.schedule_name = r.schedule_name AND e.scheduled_for < r.scheduled_for
                    AND e.status IN ('pending', 'running')))
        ORDER BY r.run_after
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) d
    LIMIT %(limit)s
),
cand AS (SELECT * FROM expired UNION ALL SELECT * FROM due LIMIT %(limit)s),
gate AS (
    INSERT INTO fleet.schedule_gates AS s (name, running_slot)
    SELECT DISTINCT ON (c.schedule_name) c.schedule_name, c.scheduled_for
    FROM cand c LEFT JOIN fleet.schedule_gates h ON h.name = c.schedule_name
    WHERE c.overlap <> 'allow'
    ORDER BY c.schedule_name, (c.scheduled_for = h.running_slot) IS TRUE DESC, c.scheduled_for
    ON CONFLICT (name) DO UPDATE SET running_slot = excluded.running_slot
    WHERE s.running_slot IS NULL OR s.running_slot = excluded.running_slot
    RETURNING s.name, s.running_slot
),
claimed AS (
    UPDATE fleet.job_runs r
    SET status = 'running',
        attempts = r.attempts + 1,
        -- a lease that ran out spent a try: the attempt crashed or stalled
        failures = r.failures + (r.status = 'running')::int,
        last_outcome = CASE WHEN r.status = 'running' THEN 'lease_expired' ELSE r.last_outcome END,
        locked_by = %(worker)s,
        locked_host = %(host)s,
        locked_pid = %(pid)s,
        locked_until = coalesce(%(now)b, now()) + make_interval(secs => %(lease_s)s),
        started_at = coalesce(%(now)b, now()),
        trace_id = encode(substr(%(ids)b::bytea, c.n * 24 - 23, 16), 'hex'),
        span_id = encode(substr(%(ids)b::bytea, c.n * 24 - 7, 8), 'hex'),
        traced = %(traced)b,
        start_by = NULL
    FROM (SELECT c.t, row_number() OVER ()::int AS n FROM cand c
          WHERE c.overlap = 'allow'
             OR EXISTS (SELECT 1 FROM gate g WHERE g.name = c.schedule_name AND g.running_slot = c.scheduled_for)
          OFFSET 0) c
    WHERE r.ctid = c.t
    RETURNING r.schedule_name, r.scheduled_for, r.job, nullif(r.args, '{}') AS args, r.attempts, r.failures,
              r.origin, r.started_at, r.trace_id, r.span_id, r.created_trace_id, r.created_span_id,
              r.run_window
),
skipped AS (
    UPDATE fleet.job_runs r
    SET status = 'skipped', finished_at = coalesce(%(now)b, now()), last_outcome = 'skipped',
        start_by = NULL, last_error = %(overlap_error)s
    FROM (SELECT c.t FROM cand c
          WHERE c.overlap = 'skip' AND c.status = 'pending' AND c.attempts = 0
            AND (c.schedule_name, c.scheduled_for) NOT IN (SELECT g.name, g.running_slot FROM gate g)
          OFFSET 0) c
    WHERE r.ctid = c.t
    RETURNING r.schedule_name, r.scheduled_for
),
out AS (
    SELECT k.*, c.status::text AS prev_status, c.attempts AS prev_attempts, c.trace_id AS prev_trace_id,
           c.span_id AS prev_span_id, c.last_outcome AS prev_outcome, c.locked_by AS prev_worker,
           c.locked_host AS prev_host, c.locked_pid AS prev_pid, c.started_at AS prev_started_at,
           greatest(c.renewed_at, c.started_at) AS prev_renewed_at
    FROM claimed k JOIN cand c USING (schedule_name, scheduled_for)
),
lost AS (
    -- The previous attempt of a reclaimed run died with its worker: record it from the row.
    -- Every column of job_attempts, in table order (schedule_name, scheduled_for, attempt, worker_id,
    -- host, pid, started_at, finished_at, outcome, error, trace_id, span_id, traced, renewed_at):
    -- the list is left out to keep the statement under psycopg's 4 kB cache limit. Traced when this
    -- worker traces: it emits the lost attempt's span. It ends at this claim; its lease was last
    -- renewed (its worker last heard from) at prev_renewed_at, the later of its claim and its last
    -- heartbeat (a renewed_at older than its claim is an earlier attempt's).
    INSERT INTO fleet.job_attempts
    SELECT o.schedule_name, o.scheduled_for, o.prev_attempts, coalesce(o.prev_worker, '?'), o.prev_host,
           o.prev_pid, coalesce(o.prev_started_at, o.started_at), o.started_at, 'lease_expired',
           'lease expired', o.prev_trace_id, o.prev_span_id, %(traced)b, o.prev_renewed_at
    FROM out o
    WHERE o.prev_status = 'running' AND o.prev_attempts > 0
    ON CONFLICT DO NOTHING
)
SELECT o.*, s.timeout, s.max_attempts, s.retry_base, s.retry_cap, NULL::text AS skipped_reason
FROM out o JOIN fleet.schedules s ON s.name = o.schedule_name
UNION ALL
SELECT k.schedule_name, k.scheduled_for, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'overlap'
FROM skipped k

-- name: run_heartbeat
-- Renew the leases of a worker's runs, noting when (renewed_at: should the worker die, its lost
-- attempt keeps when it was last heard from); a run missing from the result was taken over (fenced out).
-- Fenced on the attempt number and on the worker holding the lease: where the claim's commit was
-- lost (a failover to an asynchronous replica, a restore to a point in time), the next claim gives
-- the same attempt number again, to another worker, and the one whose claim was lost must not
-- take that worker's run for its own. run_finish tests both the same way.
-- The status test is on its text so that no partial index of running rows can stand in for the
-- primary key: the rows are found by key, one index probe each, however stale the statistics.
UPDATE fleet.job_runs r
SET locked_until = coalesce(%(now)b::timestamptz, now()) + make_interval(secs => %(lease_s)s),
    renewed_at = coalesce(%(now)b::timestamptz, now())
FROM unnest(%(names)b::text[], %(slots)b::timestamptz[], %(attempts)b::integer[]) AS v(name, slot, attempt)
WHERE r.schedule_name = v.name AND r.scheduled_for = v.slot AND r.attempts = v.attempt
  AND r.status::text = 'running' AND r.locked_by = %(worker)s
RETURNING r.schedule_name, r.scheduled_for, r.attempts

-- name: run_window_look
-- The previous success of a run's window (the schedule's newest successful run before its slot and
-- that run's result, one probe of job_runs_done), looked up when a handler first reads
-- `ctx.window`, and kept with the run so that every later attempt of the slot sees the same window
-- whatever finished meanwhile: a window that names its previous success (`previous_slot`, null
-- for none) is never looked up again. Kept only by the attempt that holds the run (fenced like a
-- heartbeat); `found` is what the lookup found, for an attempt that no longer holds it.
WITH f AS (
    SELECT coalesce((SELECT w.found FROM fleet.previous_success(%(name)s, %(slot)s, 0) w),
                    '{"previous_slot": null, "previous_result": null}') AS found
),
kept AS (
    UPDATE fleet.job_runs r
    SET run_window = coalesce(r.run_window, '{}') || f.found
    FROM f
    WHERE r.schedule_name = %(name)s AND r.scheduled_for = %(slot)s AND r.attempts = %(attempt)s
      AND r.status::text = 'running' AND r.locked_by = %(worker)s
      AND (r.run_window ? 'previous_slot') IS NOT TRUE
    RETURNING r.run_window
)
SELECT (SELECT k.run_window FROM kept k) AS kept,
       (SELECT r.run_window FROM fleet.job_runs r
        WHERE r.schedule_name = %(name)s AND r.scheduled_for = %(slot)s) AS stored,
       f.found
FROM f

-- name: run_restamp
-- A worker claimed again an attempt it still runs (its first claim's commit was lost): the row keeps
-- the running attempt's start and trace ids, so its history and `fleetctl trace` name the span that
-- is exported. Fenced like a heartbeat.
UPDATE fleet.job_runs
SET started_at = %(started_at)s, trace_id = %(trace_id)s, span_id = %(span_id)s
WHERE schedule_name = %(name)s AND scheduled_for = %(slot)s AND attempts = %(attempt)s
  AND status::text = 'running' AND locked_by = %(worker)s

-- name: run_finish
-- Record attempts' outcomes, fenced on the attempt number and the worker holding the lease (see
-- run_heartbeat): a stale worker's write matches nothing.
-- status: 'done' | 'dead' | 'pending' (retry after delay_s, or handed back with delay 0). Plain
-- successes (no result) come as keys only (done_*), the other outcomes in full; `i` numbers the
-- batch from 1. A success's result (JSON text) is the run's; any other outcome clears it.
-- As in run_heartbeat, rows are found by primary key (the status test is on its text). The
-- attempt's start and trace ids are the row's own, set by the claim. The history row needs no
-- ON CONFLICT (a speculative insertion costs more): only the fenced write of a running attempt
-- adds it, and a reclaim records only the attempt before its own, so each attempt is added once.
-- `v` is MATERIALIZED: inlined, the two unnests become an Append under the join, and when rows
-- were updated since the statement began (a heartbeat of the same worker renewed their leases),
-- the recheck of their newest versions (EvalPlanQual) matched only the first such row of the
-- batch (seen with PostgreSQL 15 and 16 under the generic plan, on batches of 60 to 100 rows):
-- the others were left running and ran again once their lease ran out. Over a CTE scan, every
-- recheck sees its row.
WITH v AS MATERIALIZED (
    SELECT d.name, d.slot, d.attempt, 'done' AS status, 'done' AS outcome, NULL::text AS error,
           0::float8 AS delay_s, 0 AS spent, NULL::text AS result, d.i
    FROM unnest(%(done_names)b::text[], %(done_slots)b::timestamptz[], %(done_attempts)b::integer[])
         WITH ORDINALITY AS d(name, slot, attempt, i)
    UNION ALL
    SELECT o.name, o.slot, o.attempt, o.status, o.outcome, o.error, o.delay_s, o.spent, o.result,
           o.i + cardinality(%(done_names)b::text[])
    FROM unnest(%(names)b::text[], %(slots)b::timestamptz[], %(attempts)b::integer[],
                %(statuses)b::text[], %(outcomes)b::text[], %(errors)b::text[],
                %(delays)b::float8[], %(spent)b::integer[], %(results)b::text[])
         WITH ORDINALITY AS o(name, slot, attempt, status, outcome, error, delay_s, spent, result, i)
),
fin AS (
    UPDATE fleet.job_runs r
    SET status = v.status::fleet.run_status,
        run_after = CASE WHEN v.status = 'pending'
                         THEN coalesce(%(now)b::timestamptz, now()) + make_interval(secs => v.delay_s)
                         ELSE r.run_after END,
        locked_by = NULL,
        locked_host = NULL,
        locked_pid = NULL,
        locked_until = NULL,
        finished_at = CASE WHEN v.status IN ('done', 'dead') THEN coalesce(%(now)b::timestamptz, now()) END,
        last_error = CASE WHEN v.status = 'done' THEN NULL ELSE coalesce(v.error, r.last_error) END,
        last_outcome = v.outcome,
        failures = r.failures + v.spent,
        result = CASE WHEN v.status = 'done' THEN v.result::jsonb END
    FROM v
    WHERE r.schedule_name = v.name AND r.scheduled_for = v.slot AND r.attempts = v.attempt
      AND r.status::text = 'running' AND r.locked_by = %(worker)s
    RETURNING r.schedule_name, r.scheduled_for, r.attempts, r.status::text AS status, r.overlap,
              r.started_at, r.trace_id, r.span_id, r.traced, v.outcome, v.error, v.i
),
history AS (
    -- Every column of job_attempts, in table order (schedule_name, scheduled_for, attempt, worker_id,
    -- host, pid, started_at, finished_at, outcome, error, trace_id, span_id, traced): the list is left
    -- out to keep the statement under psycopg's 4 kB cache limit.
    INSERT INTO fleet.job_attempts
    SELECT f.schedule_name, f.scheduled_for, f.attempts, %(worker)s, %(host)s, %(pid)s, f.started_at,
           coalesce(%(now)b::timestamptz, now()), f.outcome, f.error, f.trace_id, f.span_id, f.traced
    FROM fin f
),
ungate AS (
    UPDATE fleet.schedule_gates s SET running_slot = NULL
    FROM fin f
    WHERE f.status IN ('done', 'dead') AND f.overlap <> 'allow'
      AND s.name = f.schedule_name AND s.running_slot = f.scheduled_for
    RETURNING s.name, f.scheduled_for AS slot
),
-- A freed gate makes a run claimable only where another run of the schedule is due and waiting
-- (a queued slot, a retry or a run reclaimed after an operator freed the gate); the run itself is
-- seen here as it was before this statement, still running.
waiting AS (
    SELECT 1 FROM ungate u
    WHERE EXISTS (
        SELECT 1 FROM fleet.job_runs e
        WHERE e.schedule_name = u.name AND e.scheduled_for <> u.slot AND e.status IN ('pending', 'running')
          AND CASE WHEN e.status = 'pending' THEN e.run_after ELSE e.locked_until END
              <= coalesce(%(now)b::timestamptz, now()))
)
-- Wake idle workers when a run became claimable: a gate was freed for a waiting run, a run was
-- handed back, or a retry was planned (they recompute how long to sleep). A notification is not
-- free: committing it takes a lock that every other notifying commit of the server waits for, so
-- a finish that frees gates nobody waits for (each run of a herd of skip schedules) sends none.
SELECT f.i,
       (SELECT count(pg_notify('fleet_runs', ''))
        FROM (SELECT 1 FROM waiting UNION ALL SELECT 1 FROM fin WHERE status = 'pending' LIMIT 1) u) AS woke
FROM fin f

-- name: run_next_wait
-- Seconds from now() to the next moment a run becomes claimable (comes due, or its lease expires),
-- for a worker whose claim found nothing more. Only moments still to come count: a run due now but
-- not claimed waits for something else (a queued run for the run before it, whose finish wakes the
-- workers), and must not hide the next run to come due, created long before its time.
-- Each moment is the first entry of its partial index in order (LIMIT 1), not a min() over every
-- run to come: with slots created ahead of their time (a lookahead over many schedules), that
-- aggregate read every one of them at each wake of each idle worker. Sent after round_configure,
-- in its transaction, so that stale statistics cannot turn the walk into a scan and a sort.
-- The pending runs' index is by job: the first run to come of each job, the earliest of them.
SELECT extract(epoch FROM least(
           (SELECT min((SELECT r.run_after FROM fleet.job_runs r
                        WHERE r.status = 'pending' AND r.job = j
                          AND r.run_after > coalesce(%(now)b::timestamptz, now())
                        ORDER BY r.run_after LIMIT 1))
            FROM unnest(%(jobs)b::text[]) j),
           (SELECT r.locked_until FROM fleet.job_runs r
            WHERE r.status = 'running' AND r.locked_until > coalesce(%(now)b::timestamptz, now())
              AND r.job = ANY(%(jobs)b::text[])
            ORDER BY r.locked_until LIMIT 1))
       - coalesce(%(now)b::timestamptz, now()))::float8 AS wait_s

-- name: run_expire
-- One batch of a schedule's retention: its done and skipped runs (a discarded dead run is skipped;
-- a dead, pending or running run is never touched) that finished before the cutoff, walked along
-- the primary key from slot `after` (a run finishes after its slot, so slots past the cutoff need
-- no look). The schedule's newest successful and newest finished runs stay, for its health. The
-- delete repeats the conditions: a run changed meanwhile (retried) is rechecked and stays. Its
-- attempts go with it, and its outcome stays in the slot ledger (trigger job_runs_deleted).
-- `found` = `limit`: more may be left.
WITH keep AS (
    SELECT (SELECT r.scheduled_for FROM fleet.job_runs r
            WHERE r.schedule_name = %(name)s AND r.status = 'done'
            ORDER BY r.scheduled_for DESC LIMIT 1) AS done_slot,
           (SELECT r.scheduled_for FROM fleet.job_runs r
            WHERE r.schedule_name = %(name)s AND r.status IN ('done', 'dead', 'skipped')
            ORDER BY r.scheduled_for DESC LIMIT 1) AS finished_slot
),
batch AS (
    SELECT r.scheduled_for
    FROM fleet.job_runs r, keep k
    WHERE r.schedule_name = %(name)s
      AND r.scheduled_for > %(after)s AND r.scheduled_for < %(cutoff)s
      AND r.status IN ('done', 'skipped') AND r.finished_at < %(cutoff)s
      AND r.scheduled_for IS DISTINCT FROM k.done_slot AND r.scheduled_for IS DISTINCT FROM k.finished_slot
    ORDER BY r.scheduled_for
    LIMIT %(limit)s
),
gone AS (
    DELETE FROM fleet.job_runs r
    WHERE r.schedule_name = %(name)s AND r.scheduled_for IN (SELECT b.scheduled_for FROM batch b)
      AND r.status IN ('done', 'skipped') AND r.finished_at < %(cutoff)s
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS runs, (SELECT count(*) FROM batch) AS found,
       (SELECT max(b.scheduled_for) FROM batch b) AS last_slot

-- name: outcome_keep_none
-- For the rest of the transaction, runs deleted leave no outcome in the slot ledger (trigger
-- job_runs_deleted).
SELECT set_config('fleet.keep_outcomes', 'off', true)

-- name: outcome_expire
-- The slot ledger's retention: up to `limit` batches of outcomes whose last slot is older than the
-- cutoff (every batch when the cutoff is NULL: the ledger keeps none).
WITH gone AS (
    DELETE FROM fleet.slot_outcomes o
    WHERE o.id IN (SELECT x.id FROM fleet.slot_outcomes x
                   WHERE %(cutoff)s::timestamptz IS NULL OR x.last_slot < %(cutoff)s::timestamptz
                   ORDER BY x.last_slot LIMIT %(limit)s)
    RETURNING 1
)
SELECT count(*) AS removed FROM gone

-- name: run_confirm_ahead
-- Runs created ahead of their time that came due while a ticker runs are confirmed: their start_by
-- goes, as if this ticker had created them on time, and they wait for a worker however long. A run
-- is confirmed late in its grace, once workers have had most of it to start the run (a start
-- clears start_by too, and then nothing is written here): from `margin` before its start_by, or
-- halfway through a grace shorter than twice that. Then the schedules with stale runs (past their
-- start_by, neither started nor confirmed: missed slots) and nothing left to plan now are locked,
-- at most `limit`, for run_stale and run_settle in the same transaction (each statement its own
-- snapshot, so run_stale sees every run committed before the lock was taken).
-- Every run whose start_by is set is pending (each statement that starts or ends one clears it):
-- the status test is on its text, so that only the small index of those runs can serve, never
-- the index of every pending run (a backlog).
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
confirmed AS (
    UPDATE fleet.job_runs r SET start_by = NULL
    FROM (SELECT a.schedule_name, a.scheduled_for FROM fleet.job_runs a, t
          WHERE a.start_by >= t.now AND a.start_by <= t.now + %(margin)s::interval
            AND a.scheduled_for + (a.start_by - a.scheduled_for) / 2 <= t.now AND a.status::text = 'pending'
          FOR UPDATE OF a SKIP LOCKED) c
    WHERE r.schedule_name = c.schedule_name AND r.scheduled_for = c.scheduled_for
),
stale AS (
    SELECT DISTINCT a.schedule_name FROM fleet.job_runs a, t
    WHERE a.start_by IS NOT NULL AND a.start_by < t.now AND a.status::text = 'pending'
)
SELECT s.name, s.catchup, s.max_catchup, s.max_lateness, t.now AS db_now
FROM stale JOIN fleet.schedules s ON s.name = stale.schedule_name, t
WHERE NOT (s.enabled AND s.paused_at IS NULL AND s.broken_at IS NULL AND s.next_run_at <= t.now)
ORDER BY s.name
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED

-- name: run_stale
-- The stale runs of the named schedules (locked by run_confirm_ahead, or by a tick's schedule_due),
-- oldest first, each with how many runs its schedule has with a later slot up to now, counted up to
-- its max_catchup: under `latest` one of them stands for the missed slots, under `all` they count
-- toward max_catchup. (A tick reads them before it creates its runs, and counts its own instead.)
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
stale AS (
    SELECT r.schedule_name, r.scheduled_for, r.start_by, r.run_after
    FROM fleet.job_runs r, t
    WHERE r.schedule_name = ANY(%(names)s::text[]) AND r.start_by IS NOT NULL AND r.start_by < t.now
      AND r.status::text = 'pending'
),
newer AS (
    SELECT n.schedule_name,
           (SELECT count(*) FROM (SELECT 1 FROM fleet.job_runs o
                                  WHERE o.schedule_name = n.schedule_name AND o.origin = 'schedule'
                                    AND o.scheduled_for > n.newest AND o.scheduled_for <= t.now
                                  LIMIT sc.max_catchup) x) AS newer
    FROM (SELECT schedule_name, max(scheduled_for) AS newest FROM stale GROUP BY schedule_name) n
    JOIN fleet.schedules sc ON sc.name = n.schedule_name, t
)
SELECT s.schedule_name, s.scheduled_for, s.start_by, s.run_after, w.newer
FROM stale s JOIN newer w ON w.schedule_name = s.schedule_name
ORDER BY s.schedule_name, s.scheduled_for

-- name: run_settle
-- Stale runs settled by their schedule's catch-up policy: run (start_by cleared, so claimable at
-- once), or recorded skipped with the reason. Only a run still stale changes. The first run kept
-- gets the window naming the runs skipped in its favour (`window`, NULL for the others).
UPDATE fleet.job_runs r
SET start_by = NULL,
    status = CASE WHEN v.reason IS NULL THEN 'pending' ELSE 'skipped' END::fleet.run_status,
    finished_at = CASE WHEN v.reason IS NOT NULL THEN coalesce(%(now)s::timestamptz, now()) END,
    last_error = v.reason,
    run_window = coalesce(v.win::jsonb, r.run_window)
FROM unnest(%(names)s::text[], %(slots)s::timestamptz[], %(reasons)s::text[], %(windows)s::text[])
     AS v(name, slot, reason, win)
WHERE r.schedule_name = v.name AND r.scheduled_for = v.slot AND r.status::text = 'pending'
  AND r.start_by IS NOT NULL
RETURNING r.schedule_name, r.status::text AS status
