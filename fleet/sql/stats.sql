-- Statements of the health roll-up (fleet.health.rollup): `schedule_stats` keeps each schedule's newest
-- success and newest finished run, so that health is read without rescanning history. Newest means
-- the latest slot (for the same slot, the latest finish), as in the probes it replaces.

-- name: stats_merge
-- The runs that finished since `since` (through job_runs_finished), merged into the stats: per
-- schedule the newest success and the newest finished run win over what is stored. Merging the
-- same run twice changes nothing, so `since` may reach back a safety margin.
-- Each step reads back over that margin, so most runs it reads were merged by an earlier step:
-- only those newer than the stored row (`new`) are sorted and reach the insert, since a run that
-- met its row's conflict would lock it (a write) at every re-read, about margin / period times.
-- A success newer than the stored success is newer than the stored finished run or not; either
-- way it is in `new`, and so is every run newer than the stored finished run: the newest of `new`
-- is the newest of all where it matters. The update still picks each part (success, finished run)
-- under the row's lock, so that a merge never moves either back. One step runs at a time (the
-- chore's lock), and nothing else writes these columns.
WITH fin AS (
    SELECT r.schedule_name, r.scheduled_for, r.status, r.last_outcome, r.finished_at, r.last_error
    FROM fleet.job_runs r
    WHERE r.status IN ('done', 'dead', 'skipped') AND r.finished_at >= %(since)s
),
new AS (
    SELECT f.* FROM fin f LEFT JOIN fleet.schedule_stats cur ON cur.name = f.schedule_name
    WHERE cur.name IS NULL OR cur.last_slot IS NULL
       OR (f.status = 'done'
           AND (cur.last_success_slot IS NULL
                OR (f.scheduled_for, f.finished_at)
                   > (cur.last_success_slot, coalesce(cur.last_success_at, '-infinity'))))
       OR (f.scheduled_for, f.finished_at) > (cur.last_slot, coalesce(cur.last_finished_at, '-infinity'))
),
ok AS (
    SELECT DISTINCT ON (schedule_name) schedule_name, scheduled_for, finished_at
    FROM new WHERE status = 'done'
    ORDER BY schedule_name, scheduled_for DESC
),
fl AS (
    SELECT DISTINCT ON (schedule_name) * FROM new
    ORDER BY schedule_name, scheduled_for DESC, finished_at DESC
),
merged AS (
    INSERT INTO fleet.schedule_stats AS st (name, last_success_slot, last_success_at, last_slot, last_status,
                                            last_outcome, last_finished_at, last_error)
    SELECT fl.schedule_name, ok.scheduled_for, ok.finished_at, fl.scheduled_for, fl.status, fl.last_outcome,
           fl.finished_at, fl.last_error
    FROM fl LEFT JOIN ok USING (schedule_name)
    ON CONFLICT (name) DO UPDATE SET
        (last_success_slot, last_success_at) = (
            SELECT CASE WHEN n THEN EXCLUDED.last_success_slot ELSE st.last_success_slot END,
                   CASE WHEN n THEN EXCLUDED.last_success_at ELSE st.last_success_at END
            FROM (SELECT EXCLUDED.last_success_slot IS NOT NULL
                         AND (st.last_success_slot IS NULL
                              OR EXCLUDED.last_success_slot >= st.last_success_slot) AS n) x),
        (last_slot, last_status, last_outcome, last_finished_at, last_error) = (
            SELECT CASE WHEN n THEN EXCLUDED.last_slot ELSE st.last_slot END,
                   CASE WHEN n THEN EXCLUDED.last_status ELSE st.last_status END,
                   CASE WHEN n THEN EXCLUDED.last_outcome ELSE st.last_outcome END,
                   CASE WHEN n THEN EXCLUDED.last_finished_at ELSE st.last_finished_at END,
                   CASE WHEN n THEN EXCLUDED.last_error ELSE st.last_error END
            FROM (SELECT st.last_slot IS NULL
                         OR (EXCLUDED.last_slot, EXCLUDED.last_finished_at)
                            >= (st.last_slot, coalesce(st.last_finished_at, '-infinity')) AS n) x)
    RETURNING 1
)
SELECT (SELECT count(*) FROM fin) AS runs, (SELECT count(*) FROM merged) AS schedules

-- name: run_due_first
-- Whether a run is due and waiting to be claimed: the earliest due run of any job. The pending
-- index is by (job, run_after): its jobs are walked one index probe each (a loose index scan: the
-- next job after the last), and each job's first entry is looked at, so the answer costs a few
-- probes per job, however many runs wait.
WITH RECURSIVE jobs(job) AS (
    (SELECT r.job FROM fleet.job_runs r WHERE r.status = 'pending' ORDER BY r.job LIMIT 1)
    UNION ALL
    SELECT (SELECT r.job FROM fleet.job_runs r WHERE r.status = 'pending' AND r.job > jobs.job
            ORDER BY r.job LIMIT 1)
    FROM jobs WHERE jobs.job IS NOT NULL
)
SELECT d.run_after
FROM (SELECT min((SELECT r.run_after FROM fleet.job_runs r
                  WHERE r.status = 'pending' AND r.job = jobs.job AND r.run_after <= %(now)s
                  ORDER BY r.run_after LIMIT 1)) AS run_after
      FROM jobs) d
WHERE d.run_after IS NOT NULL

-- name: stats_probe
-- One batch of the first pass: the schedules after `after` by name, at most `limit`, each with its
-- newest success and newest finished run found by walking its primary key backwards (two index
-- probes, whatever the history's size), merged into the stats as stats_merge does. Rows marked
-- dirty are probed again (their newest finished run is what the probe finds, unless the stored one
-- was pruned since) and cleared, unless marked again meanwhile.
-- The dirty rows are found through schedule_stats_dirty: every step looks for them, and a walk of
-- every schedule to find none would cost each step O(schedules).
WITH batch AS (
    (SELECT st.name, st.dirty
     FROM fleet.schedule_stats st
     WHERE %(dirty)s AND st.dirty > 0
     ORDER BY st.name
     LIMIT %(limit)s)
    UNION ALL
    (SELECT s.name, coalesce(st.dirty, 0) AS dirty
     FROM fleet.schedules s LEFT JOIN fleet.schedule_stats st ON st.name = s.name
     WHERE NOT %(dirty)s AND s.name > %(after)s
     ORDER BY s.name
     LIMIT %(limit)s)
),
probed AS (
    SELECT b.name, b.dirty, ls.scheduled_for AS success_slot, ls.finished_at AS success_at,
           lf.scheduled_for AS slot, lf.status, lf.last_outcome, lf.finished_at, lf.last_error,
           EXISTS (SELECT 1 FROM fleet.schedule_stats st JOIN fleet.job_runs r
                     ON r.schedule_name = st.name AND r.scheduled_for = st.last_slot
                   WHERE st.name = b.name) AS stored_exists
    FROM batch b
    LEFT JOIN LATERAL (
        SELECT r.scheduled_for, r.finished_at FROM fleet.job_runs r
        WHERE r.schedule_name = b.name AND r.status = 'done'
        ORDER BY r.scheduled_for DESC LIMIT 1
    ) ls ON true
    LEFT JOIN LATERAL (
        SELECT r.scheduled_for, r.status, r.last_outcome, r.finished_at, r.last_error FROM fleet.job_runs r
        WHERE r.schedule_name = b.name AND r.status IN ('done', 'dead', 'skipped')
        ORDER BY r.scheduled_for DESC LIMIT 1
    ) lf ON true
),
merged AS (
    INSERT INTO fleet.schedule_stats AS st (name, last_success_slot, last_success_at, last_slot, last_status,
                                            last_outcome, last_finished_at, last_error)
    SELECT p.name, p.success_slot, p.success_at, p.slot, p.status, p.last_outcome, p.finished_at, p.last_error
    FROM probed p
    WHERE p.slot IS NOT NULL OR p.dirty > 0
    ON CONFLICT (name) DO UPDATE SET
        (last_success_slot, last_success_at) = (
            SELECT CASE WHEN n THEN EXCLUDED.last_success_slot ELSE st.last_success_slot END,
                   CASE WHEN n THEN EXCLUDED.last_success_at ELSE st.last_success_at END
            FROM (SELECT EXCLUDED.last_success_slot IS NOT NULL
                         AND (st.last_success_slot IS NULL
                              OR EXCLUDED.last_success_slot >= st.last_success_slot) AS n) x),
        (last_slot, last_status, last_outcome, last_finished_at, last_error) = (
            SELECT CASE WHEN n THEN EXCLUDED.last_slot ELSE st.last_slot END,
                   CASE WHEN n THEN EXCLUDED.last_status ELSE st.last_status END,
                   CASE WHEN n THEN EXCLUDED.last_outcome ELSE st.last_outcome END,
                   CASE WHEN n THEN EXCLUDED.last_finished_at ELSE st.last_finished_at END,
                   CASE WHEN n THEN EXCLUDED.last_error ELSE st.last_error END
            FROM (SELECT st.last_slot IS NULL
                         OR (st.dirty > 0 AND (SELECT p.stored_exists FROM probed p WHERE p.name = st.name))
                         OR (EXCLUDED.last_slot, EXCLUDED.last_finished_at)
                            >= (st.last_slot, coalesce(st.last_finished_at, '-infinity')) AS n) x),
        -- cleared only if no retry or discard marked it again since this batch was read
        dirty = CASE WHEN st.dirty = (SELECT p.dirty FROM probed p WHERE p.name = st.name) THEN 0
                     ELSE st.dirty END
    RETURNING 1
)
SELECT count(*) AS schedules, max(name) AS last_name, (SELECT count(*) FROM merged) AS merged FROM batch

-- name: schedule_cadence_stale
-- The timings of up to `limit` cron schedules whose stored cadence windows end at or before now, in
-- the order they end, and of up to `limit` whose windows belong to an older timing (or to none),
-- each timing once, with how many of those schedules have it. Both are read through their partial
-- indexes (migration 011), so a step costs the schedules it updates, not all cron schedules.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
batch AS (
    (SELECT s.name, s.timing_hash, s.cron, s.timezone, s.start_at, s.dst_repeated, s.dst_missing
     FROM fleet.schedules s, t
     WHERE s.cron IS NOT NULL AND coalesce(s.cadence_mid, s.cadence_until, '-infinity'::timestamptz) <= t.now
     ORDER BY coalesce(s.cadence_mid, s.cadence_until, '-infinity'::timestamptz)
     LIMIT %(limit)s)
    UNION
    (SELECT s.name, s.timing_hash, s.cron, s.timezone, s.start_at, s.dst_repeated, s.dst_missing
     FROM fleet.schedules s
     WHERE s.cron IS NOT NULL AND s.cadence_hash IS DISTINCT FROM s.timing_hash
     ORDER BY s.name
     LIMIT %(limit)s)
)
SELECT timing_hash, cron, timezone, start_at, dst_repeated, dst_missing, count(*) AS schedules
FROM batch
GROUP BY timing_hash, cron, timezone, start_at, dst_repeated, dst_missing

-- name: schedule_cadence_set
-- The cadence windows computed for the timings (see migrations 009 and 011), stored on the
-- schedules schedule_cadence_stale found with those timings: a schedule whose timing changed since
-- is left for the next step. A NULL `mid` records that none could be computed, to be tried again
-- at `until`.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
batch AS (
    (SELECT s.name FROM fleet.schedules s, t
     WHERE s.cron IS NOT NULL AND coalesce(s.cadence_mid, s.cadence_until, '-infinity'::timestamptz) <= t.now
     ORDER BY coalesce(s.cadence_mid, s.cadence_until, '-infinity'::timestamptz)
     LIMIT %(limit)s)
    UNION
    (SELECT s.name FROM fleet.schedules s
     WHERE s.cron IS NOT NULL AND s.cadence_hash IS DISTINCT FROM s.timing_hash
     ORDER BY s.name
     LIMIT %(limit)s)
)
UPDATE fleet.schedules s
SET cadence_from = v.cfrom, cadence_gap = v.gap, cadence_mid = v.mid, cadence_until = v.until,
    cadence_hash = v.hash
FROM unnest(%(hashes)s::text[], %(froms)s::timestamptz[], %(gaps)s::interval[], %(mids)s::timestamptz[],
            %(untils)s::timestamptz[]) AS v(hash, cfrom, gap, mid, until)
-- (the batch as an array: its rows are then found through the primary key, whatever the estimates)
WHERE s.name = ANY(ARRAY(SELECT name FROM batch)) AND s.timing_hash = v.hash
