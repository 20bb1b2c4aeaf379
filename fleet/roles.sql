-- The four roles of a fleet, each with the least it needs (`fleetctl migrate --roles`; safe to run
-- again, and run again by `fleetctl migrate` whenever the roles exist, so new tables are covered).
-- They are NOLOGIN and own nothing: an operator makes login roles per host and grants them one of
-- these (`CREATE ROLE host1_worker LOGIN PASSWORD '...' IN ROLE fleet_worker`). Schema changes stay
-- with the owner who runs `fleetctl migrate`.
--
--   fleet_ticker    materialises slots: reads schedules, advances their next slot (forward only,
--                   no further than its timing can yield), inserts runs whose job and args are their
--                   schedule's own; settles runs created ahead that nobody started in time (run or
--                   skipped, never started by it); deletes finished (done, skipped) runs for
--                   retention, their attempts going with them and their outcomes staying in the slot
--                   ledger, which it trims to its own retention; cannot finish or change other runs,
--                   nor delete a dead, pending or running one
--   fleet_worker    claims, heartbeats and finishes runs, each change one its own statements make
--                   (job_runs_worker_rules); may set a schedule's overlap gate only to an open run
--                   of that schedule; cannot change a schedule's definition, a run's job, args or
--                   key, nor a finished run
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
GRANT UPDATE (start_by, status, finished_at, last_error, run_window) ON fleet.job_runs TO fleet_ticker;
GRANT INSERT, UPDATE, DELETE ON fleet.processes TO fleet_ticker;
GRANT INSERT, UPDATE ON fleet.chores TO fleet_ticker;
GRANT DELETE ON fleet.slot_outcomes TO fleet_ticker;

GRANT INSERT, UPDATE ON fleet.schedule_gates TO fleet_worker;
GRANT UPDATE (status, attempts, failures, last_outcome, locked_by, locked_host, locked_pid, locked_until,
              started_at, finished_at, last_error, run_after, trace_id, span_id, traced, start_by, renewed_at,
              result, run_window)
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
-- so a fleet run as the owner pays nothing for these policies (and one test per changed row for the
-- triggers further down). On each table that has rules, every role reads every row and an operator
-- may change any; the rules below add what the ticker and the worker may.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['schedules', 'schedule_gates', 'job_runs', 'job_attempts', 'processes'] LOOP
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

-- What a ticker may change in a schedule row is said by trigger schedules_ticker_rules (below): a
-- policy sees the new row only, and the rules compare it with the old one.
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

-- Which changes of a run a worker may make is said by trigger job_runs_worker_rules (below).
DROP POLICY IF EXISTS fleet_worker_update ON fleet.job_runs;
CREATE POLICY fleet_worker_update ON fleet.job_runs FOR UPDATE TO fleet_worker USING (true) WITH CHECK (true);
-- A ticker creates runs of a schedule with the schedule's own job, args and overlap, pending (or
-- skipped, for a missed slot): it cannot choose what a worker runs. It creates the slots from the
-- schedule's next slot (the first not created yet, as the statement finds it: the tick advances it
-- after) up to the longest lookahead, due at their time: since a next slot only moves forward
-- (schedules_ticker_rules), a slot once created, and since pruned, is never created again.
DROP POLICY IF EXISTS fleet_ticker_materialize ON fleet.job_runs;
CREATE POLICY fleet_ticker_materialize ON fleet.job_runs FOR INSERT TO fleet_ticker
    WITH CHECK (origin = 'schedule' AND status IN ('pending', 'skipped') AND attempts = 0
        AND run_after = scheduled_for AND scheduled_for <= now() + interval '7 days' AND EXISTS (
        SELECT 1 FROM fleet.schedules s
        WHERE s.name = job_runs.schedule_name AND s.job = job_runs.job AND s.args = job_runs.args
          AND s.overlap = job_runs.overlap AND job_runs.scheduled_for >= s.next_run_at));
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

-- fleet_alert: `fleetctl alert`. Reads the fleet's health as `status` does, keeps the alert state
-- and the notices to send, and takes its own chore (the evaluation, one alert process at a time);
-- cannot change a schedule, a run or a route. Routes are the operator's (`fleetctl apply`).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fleet_alert') THEN
        CREATE ROLE fleet_alert NOLOGIN;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA fleet TO fleet_alert;
REVOKE CREATE ON SCHEMA fleet FROM fleet_alert;
REVOKE ALL ON ALL TABLES IN SCHEMA fleet FROM fleet_alert;
GRANT SELECT ON ALL TABLES IN SCHEMA fleet TO fleet_alert;
GRANT INSERT, UPDATE ON fleet.chores TO fleet_alert;
GRANT INSERT, UPDATE, DELETE ON fleet.alert_state, fleet.alert_outbox TO fleet_alert;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA fleet TO fleet_alert;
GRANT INSERT, UPDATE, DELETE ON fleet.alert_routes TO fleet_operator;
-- A worker records an attempt of a run as the run's current attempt (its finish) or the one before
-- (the attempt a reclaim found lost), each once (the primary key): it cannot write the history of
-- another attempt, nor of a run that does not exist. The run is read as the statement found it, so
-- an attempt written with the run's finish, or in a statement of its own after it, both pass.
DROP POLICY IF EXISTS fleet_worker_attempt ON fleet.job_attempts;
CREATE POLICY fleet_worker_attempt ON fleet.job_attempts FOR INSERT TO fleet_worker
    WITH CHECK (attempt >= 1 AND (renewed_at IS NULL OR renewed_at BETWEEN started_at AND now()) AND EXISTS (
        SELECT 1 FROM fleet.job_runs r
        WHERE r.schedule_name = job_attempts.schedule_name AND r.scheduled_for = job_attempts.scheduled_for
          AND job_attempts.attempt IN (r.attempts, r.attempts - 1)));

-- The process registry: each role writes the rows of its own kind, so that a worker cannot pass
-- for a live ticker (nor remove one), and a ticker cannot pass for workers.
DROP POLICY IF EXISTS fleet_ticker_process ON fleet.processes;
CREATE POLICY fleet_ticker_process ON fleet.processes TO fleet_ticker
    USING (kind = 'ticker') WITH CHECK (kind = 'ticker');
DROP POLICY IF EXISTS fleet_worker_process ON fleet.processes;
CREATE POLICY fleet_worker_process ON fleet.processes TO fleet_worker
    USING (kind = 'worker') WITH CHECK (kind = 'worker');

-- Row rules that compare a row with what it was, as triggers: each lets a role make only the
-- changes its own process makes, whatever statement makes them (one run or a batch). They fire only
-- where row-level security applies (never for the owner or a superuser, who pay one test of the
-- WHEN clause per row) and only for members of the role. A change outside them is refused with
-- SQLSTATE 42501 (insufficient privilege), naming the run or schedule and the rule, which undoes the
-- whole statement. AFTER triggers: a BEFORE UPDATE row trigger makes every update lock its row
-- first (a WAL record per row, the owner's included). A week is the longest lease (--lease) and
-- lookahead (--lookahead) a worker or ticker accepts.
-- The longest gap a timing can have between two slots, bounded from above: an interval schedule's
-- `every`; for a cron, by the fields it restricts (in absolute time, a day of a time zone's change
-- included): minutes 2 hours, hours too 2 days, days of the week 8 days, days of the month 63 days
-- (the 31st), `n#k` or L among weekdays 368 days; months too, 368 days where every year has the
-- days named (every month has every weekday, and the days 1 to 28), else (29 February on a Monday
-- comes every 28 years or more) 400 years, a full cycle of the calendar. Where a slot that falls in
-- a time zone's skipped hour is skipped (dst_missing = 'skip'), one slot a year may be missing: the
-- gap doubles, and a day more. Days, not months or years: intervals compare months as 30 days.
CREATE OR REPLACE FUNCTION fleet.timing_longest_gap(every interval, cron text, dst_missing text) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $f$
DECLARE
    f text[];
    dom text;
    dow text;
    special_dow boolean;
    gap interval;
BEGIN
    IF every IS NOT NULL THEN
        RETURN every;
    END IF;
    f := regexp_split_to_array(btrim(coalesce(cron, ''), E' \t'), E'[ \t]+');
    IF f[1] LIKE '@%' THEN
        gap := CASE lower(f[1]) WHEN '@hourly' THEN interval '2 hours' WHEN '@daily' THEN interval '2 days'
                    WHEN '@midnight' THEN interval '2 days' WHEN '@weekly' THEN interval '8 days'
                    WHEN '@monthly' THEN interval '63 days' ELSE interval '368 days' END;
    ELSE
        IF cardinality(f) = 6 THEN
            f := f[2:6];  -- a leading seconds field
        END IF;
        IF cardinality(f) <> 5 THEN
            RETURN interval '146097 days';
        END IF;
        dom := upper(f[3]);
        dow := upper(f[5]);
        special_dow := dow ~ '[#L]';
        IF f[4] = '*' THEN
            gap := CASE WHEN dom = '*' AND dow = '*' AND f[2] = '*' THEN interval '2 hours'
                        WHEN dom = '*' AND dow = '*' THEN interval '2 days'
                        WHEN dow <> '*' AND NOT special_dow THEN interval '8 days'
                        WHEN dow = '*' THEN interval '63 days'
                        ELSE interval '368 days' END;
        ELSIF (dom = '*' AND dow = '*') OR (dom !~ '(29|30|31|L|W)' AND NOT special_dow) THEN
            gap := interval '368 days';
        ELSE
            RETURN interval '146097 days';
        END IF;
    END IF;
    IF dst_missing = 'skip' THEN
        gap := gap * 2 + interval '1 day';
    END IF;
    RETURN gap;
END
$f$;

-- A worker changes a run only as its claim, heartbeat, finish or hand-back does:
--   claim      a pending run that is due (and not a missed slot created ahead), or a running run
--              whose lease has run out, becomes running with the next attempt number (a lost
--              lease counts one failure), a holder, and a lease of at most a week from now;
--   skip       a due pending run of a schedule with overlap `skip`, never attempted, is recorded
--              skipped (the claim found the schedule's gate held);
--   heartbeat  a running run keeps its attempt and holder, with a lease of at most a week from now
--              and its renewal noted as now (and may have its start and trace ids restamped);
--   finish     a running run, as the same attempt, becomes done or dead (finished now) or pending
--              again: a retry no later than its schedule's retry cap (a day at least) from now, or
--              handed back; its lease goes, and its failures grow by one at most.
-- A done, dead or skipped run is out of a worker's reach; so is the attempt number otherwise.
-- The rules are the trigger's WHEN clause, an expression the executor evaluates per row without
-- calling a function: the worker's hot path (every claim and finish) pays that alone. The function
-- runs only for a change the clause does not accept at once: a retry further than a day, which it
-- accepts within the schedule's retry cap, and every change it refuses.
CREATE OR REPLACE FUNCTION fleet.job_runs_worker_rules() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
    IF OLD.status = 'running' AND NEW.status = 'pending' AND NEW.attempts = OLD.attempts
       AND NEW.locked_until IS NULL AND NEW.locked_by IS NULL AND NEW.finished_at IS NULL
       AND NEW.failures IN (OLD.failures, OLD.failures + 1) AND (NEW.start_by IS NULL OR NEW.start_by = OLD.start_by)
       AND NEW.run_after <= now() + (SELECT s.retry_cap FROM fleet.schedules s WHERE s.name = NEW.schedule_name) THEN
        RETURN NULL;  -- a retry within its schedule's retry cap
    END IF;
    RAISE EXCEPTION 'permission denied for run % %: a worker may not change it from % to % (rule: %)',
        NEW.schedule_name, NEW.scheduled_for, OLD.status, NEW.status,
        CASE WHEN OLD.status = 'running' AND NEW.status = 'running' AND NEW.attempts = OLD.attempts THEN 'heartbeat'
             WHEN NEW.status = 'running' THEN 'claim'
             WHEN OLD.status = 'pending' AND NEW.status = 'skipped' THEN 'overlap skip'
             WHEN OLD.status = 'running' AND NEW.status IN ('done', 'dead', 'pending') THEN 'finish'
             ELSE 'no change a worker makes' END
        USING ERRCODE = 'insufficient_privilege';
END
$f$;
CREATE OR REPLACE TRIGGER job_runs_worker_rules AFTER UPDATE ON fleet.job_runs FOR EACH ROW
    WHEN (row_security_active('fleet.job_runs'::regclass) AND pg_has_role('fleet_worker', 'USAGE') AND (
        -- a lease's renewal is noted as now, by a heartbeat
        (NEW.renewed_at IS NOT DISTINCT FROM OLD.renewed_at
         OR (NEW.renewed_at <= now() AND NEW.renewed_at > now() - interval '7 days')) AND (
        -- heartbeat (and restamp)
        (OLD.status = 'running' AND NEW.status = 'running' AND NEW.attempts = OLD.attempts
         AND NEW.locked_by IS NOT DISTINCT FROM OLD.locked_by AND NEW.locked_until <= now() + interval '7 days'
         AND NEW.failures = OLD.failures AND NEW.run_after = OLD.run_after
         AND NEW.finished_at IS NOT DISTINCT FROM OLD.finished_at
         AND (NEW.start_by IS NULL OR NEW.start_by = OLD.start_by) AND coalesce(NEW.started_at <= now(), true))
        -- claim: a due pending run, or a running run whose lease ran out
        OR (NEW.status = 'running' AND NEW.attempts = OLD.attempts + 1
            AND ((OLD.status = 'pending' AND OLD.run_after <= now()
                  AND (OLD.start_by IS NULL OR OLD.start_by >= now()) AND NEW.failures = OLD.failures)
                 OR (OLD.status = 'running' AND OLD.locked_until < now()
                     AND NEW.failures IN (OLD.failures, OLD.failures + 1)))
            AND NEW.locked_by IS NOT NULL AND NEW.locked_until <= now() + interval '7 days' AND NEW.start_by IS NULL
            AND NEW.run_after = OLD.run_after AND NEW.finished_at IS NOT DISTINCT FROM OLD.finished_at
            AND coalesce(NEW.started_at <= now(), true))
        -- skip: the claim found the gate of an overlap-skip schedule held
        OR (OLD.status = 'pending' AND NEW.status = 'skipped' AND OLD.overlap = 'skip' AND OLD.attempts = 0
            AND NEW.attempts = 0 AND OLD.run_after <= now() AND NEW.failures = OLD.failures
            AND NEW.run_after = OLD.run_after AND NEW.finished_at <= now()
            AND NEW.locked_until IS NOT DISTINCT FROM OLD.locked_until AND NEW.start_by IS NULL)
        -- finish: done or dead now, or pending again (a retry within a day, or handed back)
        OR (OLD.status = 'running' AND NEW.status IN ('done', 'dead', 'pending') AND NEW.attempts = OLD.attempts
            AND NEW.locked_until IS NULL AND NEW.locked_by IS NULL AND NEW.failures IN (OLD.failures, OLD.failures + 1)
            AND (NEW.start_by IS NULL OR NEW.start_by = OLD.start_by)
            AND CASE WHEN NEW.status = 'pending'
                     THEN NEW.finished_at IS NULL AND NEW.run_after <= now() + interval '1 day'
                     ELSE NEW.finished_at <= now() AND NEW.run_after = OLD.run_after END))
    ) IS NOT TRUE)
    EXECUTE FUNCTION fleet.job_runs_worker_rules();

-- A ticker changes a schedule only as its tick, its health roll-up and its broken mark do: the
-- next slot moves forward, never to NULL, and no further than now plus the longest lookahead plus
-- the longest gap its timing can have (what a tick can yield); the missed slots only grow; a
-- broken mark is now or earlier; a cron schedule's cadence gaps are no longer than its timing's.
-- Its definition (timing, job, args, policies) is not granted at all.
CREATE OR REPLACE FUNCTION fleet.schedules_ticker_rules() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
    gap interval := fleet.timing_longest_gap(NEW.every, NEW.cron, NEW.dst_missing);
    rule text;
BEGIN
    IF NEW.next_run_at IS NULL AND OLD.next_run_at IS NOT NULL THEN
        rule := 'the next slot is never NULL';
    ELSIF NEW.next_run_at < OLD.next_run_at THEN
        rule := 'the next slot only moves forward';
    ELSIF NEW.next_run_at IS DISTINCT FROM OLD.next_run_at
          AND NEW.next_run_at > now() + interval '7 days' + gap THEN
        rule := format('the next slot is at most 7 days (the lookahead) and %s (its timing''s longest gap) from now',
                       gap);
    ELSIF NEW.missed_slots < OLD.missed_slots THEN
        rule := 'missed slots only grow';
    ELSIF NEW.broken_at IS DISTINCT FROM OLD.broken_at AND NEW.broken_at > now() THEN
        rule := 'a schedule breaks now, not later';
    ELSIF (NEW.cadence_gap IS DISTINCT FROM OLD.cadence_gap OR NEW.cadence_from IS DISTINCT FROM OLD.cadence_from
           OR NEW.cadence_mid IS DISTINCT FROM OLD.cadence_mid OR NEW.cadence_until IS DISTINCT FROM OLD.cadence_until)
          AND NOT (coalesce(NEW.cadence_gap <= gap, true)
                   AND coalesce(NEW.cadence_until - NEW.cadence_mid <= gap, true)
                   AND (NEW.cadence_gap IS NOT NULL OR coalesce(NEW.cadence_mid - NEW.cadence_from <= gap, true))) THEN
        rule := 'a cadence gap is at most its timing''s longest gap';
    ELSE
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'permission denied for schedule %: a ticker may not make this change (rule: %)', NEW.name, rule
        USING ERRCODE = 'insufficient_privilege';
END
$f$;
-- The WHEN clause passes a tick's usual change (the next slot forward within its interval, or
-- within 2 hours for a cron, plus the lookahead) without calling the function, which sees the rest.
CREATE OR REPLACE TRIGGER schedules_ticker_rules AFTER UPDATE ON fleet.schedules FOR EACH ROW
    WHEN (row_security_active('fleet.schedules'::regclass) AND pg_has_role('fleet_ticker', 'USAGE') AND (
        (NEW.next_run_at IS NOT DISTINCT FROM OLD.next_run_at
         OR (NEW.next_run_at > OLD.next_run_at
             AND NEW.next_run_at <= now() + interval '7 days' + coalesce(NEW.every, interval '2 hours')))
        AND NEW.missed_slots >= OLD.missed_slots
        AND (NEW.broken_at IS NOT DISTINCT FROM OLD.broken_at OR NEW.broken_at IS NULL OR NEW.broken_at <= now())
        AND NEW.cadence_gap IS NOT DISTINCT FROM OLD.cadence_gap
        AND NEW.cadence_from IS NOT DISTINCT FROM OLD.cadence_from
        AND NEW.cadence_mid IS NOT DISTINCT FROM OLD.cadence_mid
        AND NEW.cadence_until IS NOT DISTINCT FROM OLD.cadence_until
    ) IS NOT TRUE)
    EXECUTE FUNCTION fleet.schedules_ticker_rules();

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
