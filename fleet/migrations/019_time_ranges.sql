-- Every instant fleet stores lies between the years 1000 and 9000, and a cron schedule's cadence
-- gap is positive and at most 400 years (a full cycle of the Gregorian calendar). Every reader
-- (`status`, the metrics, the dashboard) decodes such values into Python's datetime (years 1 to
-- 9999), and the arithmetic it does on them (a margin, a grace, a gap) stays within that range: a
-- row holding year 1 or 9999 would stop them all, and a role may write some of these columns (a
-- ticker its process registry, health stats and cadence; a worker its runs' start). The fleet
-- itself writes instants from 1970 on (start_at, backfill) up to a schedule's slots, never near
-- either end. This replaces the checks of finite times (infinity is out of range too). NOT VALID:
-- rows already stored are not scanned (a large table is not locked for it); every row written from
-- now on is checked.
ALTER TABLE fleet.job_runs
    ADD CONSTRAINT job_runs_time_range CHECK (
        scheduled_for >= '1000-01-01 00:00+00' AND scheduled_for < '9000-01-01 00:00+00'
        AND run_after >= '1000-01-01 00:00+00' AND run_after < '9000-01-01 00:00+00'
        AND locked_until >= '1000-01-01 00:00+00' AND locked_until < '9000-01-01 00:00+00'
        AND started_at >= '1000-01-01 00:00+00' AND started_at < '9000-01-01 00:00+00'
        AND finished_at >= '1000-01-01 00:00+00' AND finished_at < '9000-01-01 00:00+00'
        AND created_at >= '1000-01-01 00:00+00' AND created_at < '9000-01-01 00:00+00'
        AND start_by >= '1000-01-01 00:00+00' AND start_by < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.job_runs DROP CONSTRAINT job_runs_finite_times, DROP CONSTRAINT job_runs_start_by_finite;
ALTER TABLE fleet.schedules
    ADD CONSTRAINT schedules_time_range CHECK (
        start_at >= '1000-01-01 00:00+00' AND start_at < '9000-01-01 00:00+00'
        AND paused_at >= '1000-01-01 00:00+00' AND paused_at < '9000-01-01 00:00+00'
        AND next_run_at >= '1000-01-01 00:00+00' AND next_run_at < '9000-01-01 00:00+00'
        AND created_at >= '1000-01-01 00:00+00' AND created_at < '9000-01-01 00:00+00'
        AND updated_at >= '1000-01-01 00:00+00' AND updated_at < '9000-01-01 00:00+00'
        AND cadence_from >= '1000-01-01 00:00+00' AND cadence_from < '9000-01-01 00:00+00'
        AND cadence_mid >= '1000-01-01 00:00+00' AND cadence_mid < '9000-01-01 00:00+00'
        AND cadence_until >= '1000-01-01 00:00+00' AND cadence_until < '9000-01-01 00:00+00'
        AND broken_at >= '1000-01-01 00:00+00' AND broken_at < '9000-01-01 00:00+00'
        AND cadence_gap > '0 s' AND cadence_gap <= '146097 days'
    ) NOT VALID;
ALTER TABLE fleet.schedules DROP CONSTRAINT schedules_finite_times;
ALTER TABLE fleet.job_attempts
    ADD CONSTRAINT job_attempts_time_range CHECK (
        scheduled_for >= '1000-01-01 00:00+00' AND scheduled_for < '9000-01-01 00:00+00'
        AND started_at >= '1000-01-01 00:00+00' AND started_at < '9000-01-01 00:00+00'
        AND finished_at >= '1000-01-01 00:00+00' AND finished_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.schedule_stats
    ADD CONSTRAINT schedule_stats_time_range CHECK (
        last_success_slot >= '1000-01-01 00:00+00' AND last_success_slot < '9000-01-01 00:00+00'
        AND last_success_at >= '1000-01-01 00:00+00' AND last_success_at < '9000-01-01 00:00+00'
        AND last_slot >= '1000-01-01 00:00+00' AND last_slot < '9000-01-01 00:00+00'
        AND last_finished_at >= '1000-01-01 00:00+00' AND last_finished_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.schedule_gates
    ADD CONSTRAINT schedule_gates_time_range CHECK (
        running_slot >= '1000-01-01 00:00+00' AND running_slot < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.processes
    ADD CONSTRAINT processes_time_range CHECK (
        started_at >= '1000-01-01 00:00+00' AND started_at < '9000-01-01 00:00+00'
        AND seen_at >= '1000-01-01 00:00+00' AND seen_at < '9000-01-01 00:00+00'
        AND crashed_at >= '1000-01-01 00:00+00' AND crashed_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.chores
    ADD CONSTRAINT chores_time_range CHECK (
        due_at >= '1000-01-01 00:00+00' AND due_at < '9000-01-01 00:00+00'
        AND mark >= '1000-01-01 00:00+00' AND mark < '9000-01-01 00:00+00'
        AND stepped_at >= '1000-01-01 00:00+00' AND stepped_at < '9000-01-01 00:00+00'
    ) NOT VALID;
