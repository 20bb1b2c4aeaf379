-- The window a run covers, handed to its handler (`ctx.window`), and a schedule's start spread.
--
-- result: the JSON the run's handler returned (at most fleet.window.MAX_RESULT_BYTES), written by
-- the finish that records the run done. run_window: what the run covers, as JSON: `collapsed`,
-- `collapsed_first` and `collapsed_last` (the slots the catch-up policy dropped or skipped in
-- favour of this run), written when the run is created or settled; `previous_slot` and
-- `previous_result` (the schedule's newest successful run before this slot, and its result), added
-- by the run's first claim (fleet.previous_success) and kept for every later attempt, so that every
-- attempt of a slot sees the same window whatever finished meanwhile.
ALTER TABLE fleet.job_runs
    ADD COLUMN result jsonb,
    ADD COLUMN run_window jsonb;

-- Each schedule's successful runs by slot: the newest success before a slot is one probe, however
-- many pending, running, dead or skipped runs lie between (a backlog, a backfill, a schedule that
-- keeps failing). Built here without CONCURRENTLY (migrations run in a transaction): on a large
-- job_runs it takes a while, during which runs are not written.
CREATE INDEX job_runs_done ON fleet.job_runs (schedule_name, scheduled_for) WHERE status = 'done';

-- What a run's first claim adds to its window: the schedule's newest successful run before the
-- run's slot, and that run's result (one probe of job_runs_done); no row on a later claim (the run
-- has attempts already: its window stays as it is). A set-returning SQL function of one SELECT, so
-- that the planner inlines it into the claim, which stays short enough for the driver to keep its
-- parsed form.
CREATE FUNCTION fleet.previous_success(run_schedule text, run_slot timestamptz, run_attempts integer)
RETURNS TABLE (found jsonb) LANGUAGE sql STABLE ROWS 1 AS $$
    SELECT jsonb_build_object('previous_slot', p.scheduled_for, 'previous_result', p.result)
    FROM fleet.job_runs p
    WHERE run_attempts = 0 AND p.schedule_name = run_schedule AND p.scheduled_for < run_slot
      AND p.status = 'done'
    ORDER BY p.scheduled_for DESC
    LIMIT 1
$$;

-- spread: the schedule's start spread as the file gives it (NULL: none). spread_offset: where in it
-- this schedule's runs start, a hash of its name computed by apply (fleet.schedfile.spread_offset):
-- each run becomes claimable at its slot plus the offset, the same on every ticker and restart.
ALTER TABLE fleet.schedules
    ADD COLUMN spread interval,
    ADD COLUMN spread_offset interval NOT NULL DEFAULT '0';
ALTER TABLE fleet.schedules
    ADD CONSTRAINT schedules_spread_offset CHECK (spread_offset >= '0' AND spread_offset < '3660 days') NOT VALID;
