-- The window a run covers, handed to its handler (`ctx.window`), and a schedule's start spread.
--
-- result: the JSON the run's handler returned (at most fleet.window.MAX_RESULT_BYTES), written by
-- the finish that records the run done. run_window: what the run covers, as JSON: `collapsed`,
-- `collapsed_first` and `collapsed_last` (the slots the catch-up policy dropped or skipped in
-- favour of this run), written when the run is created or settled; `previous_slot` and
-- `previous_result` (the schedule's newest successful run before this slot, and its result), added
-- by the run's first claim (fleet.claim_window) and kept for every later attempt, so that every
-- attempt of a slot sees the same window whatever finished meanwhile.
ALTER TABLE fleet.job_runs
    ADD COLUMN result jsonb,
    ADD COLUMN run_window jsonb;

-- Each schedule's successful runs by slot: the newest success before a slot is one probe, however
-- many pending, running, dead or skipped runs lie between (a backlog, a backfill, a schedule that
-- keeps failing). Built here without CONCURRENTLY (migrations run in a transaction): on a large
-- job_runs it takes a while, during which runs are not written.
CREATE INDEX job_runs_done ON fleet.job_runs (schedule_name, scheduled_for) WHERE status = 'done';

-- The window of a run being claimed (`r`, as it was before the claim): on its first claim (no
-- attempt yet), its stored window with the newest successful run before its slot added (one
-- probe of job_runs_done); on any later claim, its window as it is. A function so that
-- the claim statement stays short enough for the driver to keep its parsed form.
CREATE FUNCTION fleet.claim_window(r fleet.job_runs) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    slot timestamptz;
    returned jsonb;
BEGIN
    IF r.attempts > 0 THEN
        RETURN r.run_window;
    END IF;
    SELECT p.scheduled_for, p.result INTO slot, returned
    FROM fleet.job_runs p
    WHERE p.schedule_name = r.schedule_name AND p.scheduled_for < r.scheduled_for AND p.status = 'done'
    ORDER BY p.scheduled_for DESC
    LIMIT 1;
    IF slot IS NULL THEN
        RETURN r.run_window;
    END IF;
    RETURN coalesce(r.run_window, '{}')
        || jsonb_build_object('previous_slot', slot, 'previous_result', returned);
END
$$;

-- spread: the schedule's start spread as the file gives it (NULL: none). spread_offset: where in it
-- this schedule's runs start, a hash of its name computed by apply (fleet.schedfile.spread_offset):
-- each run becomes claimable at its slot plus the offset, the same on every ticker and restart.
ALTER TABLE fleet.schedules
    ADD COLUMN spread interval,
    ADD COLUMN spread_offset interval NOT NULL DEFAULT '0';
ALTER TABLE fleet.schedules
    ADD CONSTRAINT schedules_spread_offset CHECK (spread_offset >= '0' AND spread_offset < '3660 days') NOT VALID;
