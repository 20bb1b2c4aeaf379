-- The four roles of a fleet, each with the least it needs (`fleetctl migrate --roles`; safe to run
-- again, and run again by `fleetctl migrate` whenever the roles exist, so new tables are covered).
-- They are NOLOGIN and own nothing: an operator makes login roles per host and grants them one of
-- these (`CREATE ROLE host1_worker LOGIN PASSWORD '...' IN ROLE fleet_worker`). Schema changes stay
-- with the owner who runs `fleetctl migrate`.
--
--   fleet_ticker    materialises slots: reads schedules, advances their next slot, inserts runs
--                   whose job and args are their schedule's own; settles runs created ahead that
--                   nobody started in time (run or skipped, never started by it); deletes finished
--                   (done, skipped) runs for retention, their attempts going with them and their
--                   outcomes staying in the slot ledger, which it trims to its own retention; cannot
--                   finish or change other runs, nor delete a dead, pending or running one
--   fleet_worker    claims, heartbeats and finishes runs; may set a schedule's overlap gate only to
--                   an open run of that schedule; cannot change a schedule's definition, or a run's
--                   job, args or key
--   fleet_operator  applies schedules and repairs runs (retry, discard, trigger, backfill, prune),
--                   each recorded in the audit rows, which it can add but never change
--   fleet_reader    reads everything: status, runs, show, metrics, the dashboard

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['fleet_ticker', 'fleet_worker', 'fleet_operator', 'fleet_reader'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA fleet TO fleet_ticker, fleet_worker, fleet_operator, fleet_reader;
REVOKE CREATE ON SCHEMA fleet FROM fleet_ticker, fleet_worker, fleet_operator, fleet_reader;

-- Start from nothing on every table, then grant what each role uses.
REVOKE ALL ON ALL TABLES IN SCHEMA fleet FROM fleet_ticker, fleet_worker, fleet_operator, fleet_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA fleet TO fleet_ticker, fleet_worker, fleet_operator, fleet_reader;

GRANT UPDATE (next_run_at, missed_slots, cadence_from, cadence_mid, cadence_until, cadence_hash, cadence_gap,
               broken_at, broken_error)
    ON fleet.schedules TO fleet_ticker;
GRANT INSERT, UPDATE ON fleet.schedule_stats TO fleet_ticker;
GRANT INSERT, DELETE ON fleet.job_runs TO fleet_ticker;
GRANT UPDATE (start_by, status, finished_at, last_error) ON fleet.job_runs TO fleet_ticker;
GRANT INSERT, UPDATE, DELETE ON fleet.processes TO fleet_ticker;
GRANT INSERT, UPDATE ON fleet.chores TO fleet_ticker;
GRANT DELETE ON fleet.slot_outcomes TO fleet_ticker;

GRANT INSERT, UPDATE ON fleet.schedule_gates TO fleet_worker;
GRANT UPDATE (status, attempts, failures, last_outcome, locked_by, locked_host, locked_pid, locked_until,
              started_at, finished_at, last_error, run_after, trace_id, span_id, traced, start_by, renewed_at)
    ON fleet.job_runs TO fleet_worker;
GRANT INSERT ON fleet.job_attempts TO fleet_worker;
GRANT INSERT, UPDATE, DELETE ON fleet.processes TO fleet_worker;

GRANT INSERT, UPDATE, DELETE ON fleet.schedules, fleet.schedule_gates, fleet.job_runs, fleet.job_attempts
    TO fleet_operator;
GRANT UPDATE (dirty) ON fleet.schedule_stats TO fleet_operator;
GRANT DELETE ON fleet.processes TO fleet_operator;
-- The audit rows: an operator adds them (`at` and `role` are the database's, never written), nobody
-- changes one, and only the tickers' retention removes them.
GRANT INSERT (by_name, action, schedule, note, details) ON fleet.schedule_audit TO fleet_operator;
GRANT DELETE ON fleet.schedule_audit TO fleet_ticker;

-- Row-level rules where a column grant cannot say enough. The owner (and a superuser) bypasses them,
-- so a fleet run as the owner pays nothing for them. On each table that has rules, every role reads
-- every row and an operator may change any; the rules below add what the ticker and the worker may.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['schedules', 'schedule_gates', 'job_runs'] LOOP
        EXECUTE format('ALTER TABLE fleet.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('DROP POLICY IF EXISTS fleet_read ON fleet.%I', t);
        EXECUTE format('CREATE POLICY fleet_read ON fleet.%I FOR SELECT USING (true)', t);
        EXECUTE format('DROP POLICY IF EXISTS fleet_operator_all ON fleet.%I', t);
        EXECUTE format(
            'CREATE POLICY fleet_operator_all ON fleet.%I TO fleet_operator USING (true) WITH CHECK (true)', t
        );
    END LOOP;
END
$$;

DROP POLICY IF EXISTS fleet_ticker_advance ON fleet.schedules;
CREATE POLICY fleet_ticker_advance ON fleet.schedules FOR UPDATE TO fleet_ticker USING (true) WITH CHECK (true);
-- A worker holds a schedule's gate only for an open run of that schedule (the claim sets it for
-- the run it claims, the finish clears it): a gate set to a slot without a run would block every
-- later run of a skip or queue schedule.
DROP POLICY IF EXISTS fleet_worker_gate ON fleet.schedule_gates;
CREATE POLICY fleet_worker_gate ON fleet.schedule_gates TO fleet_worker USING (true)
    WITH CHECK (running_slot IS NULL OR EXISTS (
        SELECT 1 FROM fleet.job_runs r
        WHERE r.schedule_name = schedule_gates.name AND r.scheduled_for = schedule_gates.running_slot
          AND r.status IN ('pending', 'running')));

DROP POLICY IF EXISTS fleet_worker_update ON fleet.job_runs;
CREATE POLICY fleet_worker_update ON fleet.job_runs FOR UPDATE TO fleet_worker USING (true) WITH CHECK (true);
-- A ticker creates runs of a schedule with the schedule's own job, args and overlap, pending (or
-- skipped, for a missed slot): it cannot choose what a worker runs.
DROP POLICY IF EXISTS fleet_ticker_materialize ON fleet.job_runs;
CREATE POLICY fleet_ticker_materialize ON fleet.job_runs FOR INSERT TO fleet_ticker
    WITH CHECK (origin = 'schedule' AND status IN ('pending', 'skipped') AND attempts = 0 AND EXISTS (
        SELECT 1 FROM fleet.schedules s
        WHERE s.name = job_runs.schedule_name AND s.job = job_runs.job AND s.args = job_runs.args
          AND s.overlap = job_runs.overlap));
-- A ticker changes only runs created ahead and never started (start_by set, pending): it confirms
-- one (start_by cleared) or settles it by the catch-up policy (left pending or recorded skipped).
DROP POLICY IF EXISTS fleet_ticker_settle ON fleet.job_runs;
CREATE POLICY fleet_ticker_settle ON fleet.job_runs FOR UPDATE TO fleet_ticker
    USING (start_by IS NOT NULL AND status = 'pending' AND attempts = 0 AND origin = 'schedule')
    WITH CHECK (start_by IS NULL AND status IN ('pending', 'skipped') AND attempts = 0);
-- Retention: a ticker deletes only finished runs; a dead run stays until an operator handles it.
DROP POLICY IF EXISTS fleet_ticker_retention ON fleet.job_runs;
CREATE POLICY fleet_ticker_retention ON fleet.job_runs FOR DELETE TO fleet_ticker
    USING (status IN ('done', 'skipped'));

-- The audit rows: every role reads them, an operator adds them, and a ticker's retention removes
-- only rows older than the shortest retention a schedule may have (1 hour): none an operator just
-- wrote.
ALTER TABLE fleet.schedule_audit ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS fleet_read ON fleet.schedule_audit;
CREATE POLICY fleet_read ON fleet.schedule_audit FOR SELECT USING (true);
DROP POLICY IF EXISTS fleet_operator_add ON fleet.schedule_audit;
CREATE POLICY fleet_operator_add ON fleet.schedule_audit FOR INSERT TO fleet_operator WITH CHECK (true);
DROP POLICY IF EXISTS fleet_ticker_retention ON fleet.schedule_audit;
CREATE POLICY fleet_ticker_retention ON fleet.schedule_audit FOR DELETE TO fleet_ticker
    USING (at < now() - interval '1 hour');
