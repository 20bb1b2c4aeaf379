-- The instants of the tables and columns that came after the range checks (migration 019) lie
-- between the years 1000 and 9000 too, so that every reader decodes them and does its arithmetic
-- on them: the lease renewals, the slot ledger, the alerts and the audit rows. NOT VALID, as there:
-- rows already stored are not scanned; every row written from now on is checked.
ALTER TABLE fleet.job_runs
    ADD CONSTRAINT job_runs_renewed_range CHECK (
        renewed_at >= '1000-01-01 00:00+00' AND renewed_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.job_attempts
    ADD CONSTRAINT job_attempts_renewed_range CHECK (
        renewed_at >= '1000-01-01 00:00+00' AND renewed_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.slot_outcomes
    ADD CONSTRAINT slot_outcomes_time_range CHECK (
        first_slot >= '1000-01-01 00:00+00' AND first_slot < '9000-01-01 00:00+00'
        AND last_slot >= '1000-01-01 00:00+00' AND last_slot < '9000-01-01 00:00+00'
        AND removed_at >= '1000-01-01 00:00+00' AND removed_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.alert_routes
    ADD CONSTRAINT alert_routes_time_range CHECK (
        updated_at >= '1000-01-01 00:00+00' AND updated_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.alert_state
    ADD CONSTRAINT alert_state_time_range CHECK (
        opened_at >= '1000-01-01 00:00+00' AND opened_at < '9000-01-01 00:00+00'
        AND last_sent_at >= '1000-01-01 00:00+00' AND last_sent_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.alert_outbox
    ADD CONSTRAINT alert_outbox_time_range CHECK (
        created_at >= '1000-01-01 00:00+00' AND created_at < '9000-01-01 00:00+00'
        AND next_at >= '1000-01-01 00:00+00' AND next_at < '9000-01-01 00:00+00'
        AND locked_until >= '1000-01-01 00:00+00' AND locked_until < '9000-01-01 00:00+00'
        AND sent_at >= '1000-01-01 00:00+00' AND sent_at < '9000-01-01 00:00+00'
    ) NOT VALID;
ALTER TABLE fleet.schedule_audit
    ADD CONSTRAINT schedule_audit_time_range CHECK (
        at >= '1000-01-01 00:00+00' AND at < '9000-01-01 00:00+00'
    ) NOT VALID;
