-- Every instant of a run and of a schedule is a finite time. PostgreSQL's 'infinity' and
-- '-infinity' have no Python value: a run holding one could not be decoded by the worker that
-- claims it (its claim would fail again at every round, and no run would be claimed), and a
-- schedule holding one could not be read by `status`, the metrics or the dashboard. No role, the
-- owner included, can store one. NOT VALID: rows already stored are not scanned (a large table is
-- not locked for it); every row written from now on is checked.
ALTER TABLE fleet.job_runs
    ADD CONSTRAINT job_runs_finite_times CHECK (
        isfinite(scheduled_for) AND isfinite(run_after) AND isfinite(locked_until)
        AND isfinite(started_at) AND isfinite(finished_at)
    ) NOT VALID;
ALTER TABLE fleet.schedules
    ADD CONSTRAINT schedules_finite_times CHECK (
        isfinite(next_run_at) AND isfinite(start_at) AND isfinite(paused_at) AND isfinite(broken_at)
    ) NOT VALID;
