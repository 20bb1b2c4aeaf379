-- The schema `fleet` as migrations build it, in canonical form (generated: python -m
-- tests.schema_snapshot > schema.sql). A test checks that migrating an empty database yields it.
CREATE TYPE fleet.run_status AS ENUM ('pending', 'running', 'done', 'dead', 'skipped');

CREATE TABLE fleet.alert_outbox (
    id bigint NOT NULL,
    route text NOT NULL,
    subject text NOT NULL,
    verdict text NOT NULL,
    event text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'pending'::text,
    attempts integer NOT NULL DEFAULT 0,
    next_at timestamp with time zone NOT NULL DEFAULT now(),
    locked_by text,
    locked_until timestamp with time zone,
    sent_at timestamp with time zone,
    last_error text,
    CONSTRAINT alert_outbox_event_check CHECK ((event = ANY (ARRAY['alert'::text, 'repeat'::text, 'recovery'::text]))),
    CONSTRAINT alert_outbox_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'sending'::text, 'sent'::text, 'failed'::text]))),
    CONSTRAINT alert_outbox_time_range CHECK (((created_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (created_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (next_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (next_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (locked_until >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (locked_until < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (sent_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (sent_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT alert_outbox_route_fkey FOREIGN KEY (route) REFERENCES fleet.alert_routes(name) ON DELETE CASCADE,
    CONSTRAINT alert_outbox_pkey PRIMARY KEY (id)
);
CREATE INDEX alert_outbox_created ON fleet.alert_outbox USING btree (created_at);
CREATE INDEX alert_outbox_open ON fleet.alert_outbox USING btree (route, subject, id) WHERE (status = ANY (ARRAY['pending'::text, 'sending'::text]));
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.alert_outbox TO fleet_alert;
GRANT SELECT ON fleet.alert_outbox TO fleet_operator;
GRANT SELECT ON fleet.alert_outbox TO fleet_reader;
GRANT SELECT ON fleet.alert_outbox TO fleet_ticker;
GRANT SELECT ON fleet.alert_outbox TO fleet_worker;

CREATE TABLE fleet.alert_routes (
    name text NOT NULL,
    kind text NOT NULL,
    schedules text[] NOT NULL,
    verdicts text[] NOT NULL,
    repeat interval,
    recovery boolean NOT NULL DEFAULT true,
    target jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT alert_routes_kind_check CHECK ((kind = ANY (ARRAY['webhook'::text, 'slack'::text, 'email'::text]))),
    CONSTRAINT alert_routes_repeat_check CHECK ((repeat > '00:00:00'::interval)),
    CONSTRAINT alert_routes_time_range CHECK (((updated_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (updated_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT alert_routes_pkey PRIMARY KEY (name)
);
GRANT SELECT ON fleet.alert_routes TO fleet_alert;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.alert_routes TO fleet_operator;
GRANT SELECT ON fleet.alert_routes TO fleet_reader;
GRANT SELECT ON fleet.alert_routes TO fleet_ticker;
GRANT SELECT ON fleet.alert_routes TO fleet_worker;

CREATE TABLE fleet.alert_state (
    route text NOT NULL,
    subject text NOT NULL,
    verdict text NOT NULL,
    opened_at timestamp with time zone NOT NULL,
    last_sent_at timestamp with time zone NOT NULL,
    notices integer NOT NULL DEFAULT 1,
    CONSTRAINT alert_state_time_range CHECK (((opened_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (opened_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (last_sent_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (last_sent_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT alert_state_route_fkey FOREIGN KEY (route) REFERENCES fleet.alert_routes(name) ON DELETE CASCADE,
    CONSTRAINT alert_state_pkey PRIMARY KEY (route, subject, verdict)
);
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.alert_state TO fleet_alert;
GRANT SELECT ON fleet.alert_state TO fleet_operator;
GRANT SELECT ON fleet.alert_state TO fleet_reader;
GRANT SELECT ON fleet.alert_state TO fleet_ticker;
GRANT SELECT ON fleet.alert_state TO fleet_worker;

CREATE TABLE fleet.chores (
    name text NOT NULL,
    due_at timestamp with time zone NOT NULL DEFAULT now(),
    mark timestamp with time zone,
    cursor text,
    steps bigint NOT NULL DEFAULT 0,
    stepped_at timestamp with time zone,
    CONSTRAINT chores_time_range CHECK (((due_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (due_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (mark >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (mark < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (stepped_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (stepped_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT chores_pkey PRIMARY KEY (name)
);
GRANT INSERT, SELECT, UPDATE ON fleet.chores TO fleet_alert;
GRANT SELECT ON fleet.chores TO fleet_operator;
GRANT SELECT ON fleet.chores TO fleet_reader;
GRANT INSERT, SELECT, UPDATE ON fleet.chores TO fleet_ticker;
GRANT SELECT ON fleet.chores TO fleet_worker;

CREATE TABLE fleet.job_attempts (
    schedule_name text NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    attempt integer NOT NULL,
    worker_id text NOT NULL,
    host text,
    pid integer,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    outcome text,
    error text,
    trace_id text,
    span_id text,
    traced boolean NOT NULL DEFAULT false,
    renewed_at timestamp with time zone,
    CONSTRAINT job_attempts_renewed_range CHECK (((renewed_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (renewed_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT job_attempts_time_range CHECK (((scheduled_for >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (scheduled_for < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (started_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (started_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (finished_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (finished_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT job_attempts_pkey PRIMARY KEY (schedule_name, scheduled_for, attempt)
);
ALTER TABLE fleet.job_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_operator_all ON fleet.job_attempts FOR ALL TO fleet_operator USING (true) WITH CHECK (true);
CREATE POLICY fleet_read ON fleet.job_attempts FOR SELECT TO public USING (true);
CREATE POLICY fleet_worker_attempt ON fleet.job_attempts FOR INSERT TO fleet_worker WITH CHECK (((attempt >= 1) AND ((renewed_at IS NULL) OR ((renewed_at >= started_at) AND (renewed_at <= now()))) AND (EXISTS ( SELECT 1
   FROM fleet.job_runs r
  WHERE ((r.schedule_name = job_attempts.schedule_name) AND (r.scheduled_for = job_attempts.scheduled_for) AND ((job_attempts.attempt = r.attempts) OR (job_attempts.attempt = (r.attempts - 1))))))));
GRANT SELECT ON fleet.job_attempts TO fleet_alert;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.job_attempts TO fleet_operator;
GRANT SELECT ON fleet.job_attempts TO fleet_reader;
GRANT SELECT ON fleet.job_attempts TO fleet_ticker;
GRANT INSERT, SELECT ON fleet.job_attempts TO fleet_worker;

CREATE TABLE fleet.job_runs (
    schedule_name text NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    job text NOT NULL,
    args jsonb NOT NULL DEFAULT '{}'::jsonb,
    overlap text NOT NULL DEFAULT 'allow'::text,
    origin text NOT NULL DEFAULT 'schedule'::text,
    status fleet.run_status NOT NULL DEFAULT 'pending'::fleet.run_status,
    attempts integer NOT NULL DEFAULT 0,
    failures integer NOT NULL DEFAULT 0,
    run_after timestamp with time zone NOT NULL,
    locked_by text,
    locked_host text,
    locked_pid integer,
    locked_until timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    last_error text,
    last_outcome text,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    created_trace_id text,
    created_span_id text,
    trace_id text,
    span_id text,
    traced boolean NOT NULL DEFAULT false,
    start_by timestamp with time zone,
    result jsonb,
    run_window jsonb,
    renewed_at timestamp with time zone,
    CONSTRAINT job_runs_origin_check CHECK ((origin = ANY (ARRAY['schedule'::text, 'trigger'::text, 'backfill'::text]))),
    CONSTRAINT job_runs_renewed_range CHECK (((renewed_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (renewed_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT job_runs_time_range CHECK (((scheduled_for >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (scheduled_for < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (run_after >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (run_after < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (locked_until >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (locked_until < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (started_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (started_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (finished_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (finished_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (created_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (created_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (start_by >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (start_by < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT job_runs_schedule_name_fkey FOREIGN KEY (schedule_name) REFERENCES fleet.schedules(name) ON DELETE CASCADE,
    CONSTRAINT job_runs_pkey PRIMARY KEY (schedule_name, scheduled_for)
);
ALTER TABLE fleet.job_runs SET (autovacuum_analyze_scale_factor=0, autovacuum_analyze_threshold=5000, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=5000);
CREATE INDEX job_runs_dead ON fleet.job_runs USING btree (schedule_name) WHERE (status = 'dead'::fleet.run_status);
CREATE INDEX job_runs_done ON fleet.job_runs USING btree (schedule_name, scheduled_for) WHERE (status = 'done'::fleet.run_status);
CREATE INDEX job_runs_finished ON fleet.job_runs USING btree (finished_at) WHERE (status = ANY (ARRAY['done'::fleet.run_status, 'dead'::fleet.run_status, 'skipped'::fleet.run_status]));
CREATE INDEX job_runs_leases ON fleet.job_runs USING btree (locked_until) WHERE (status = 'running'::fleet.run_status);
CREATE INDEX job_runs_open ON fleet.job_runs USING btree (schedule_name, scheduled_for) WHERE (status = ANY (ARRAY['pending'::fleet.run_status, 'running'::fleet.run_status]));
CREATE INDEX job_runs_pending ON fleet.job_runs USING btree (job, run_after) WHERE (status = 'pending'::fleet.run_status);
CREATE INDEX job_runs_start_by ON fleet.job_runs USING btree (start_by) WHERE (start_by IS NOT NULL);
CREATE TRIGGER job_runs_deleted AFTER DELETE ON fleet.job_runs REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION fleet.runs_deleted();
CREATE TRIGGER job_runs_worker_rules AFTER UPDATE ON fleet.job_runs FOR EACH ROW WHEN ((row_security_active(('fleet.job_runs'::regclass)::oid) AND pg_has_role('fleet_worker'::name, 'USAGE'::text) AND ((((NOT (new.renewed_at IS DISTINCT FROM old.renewed_at)) OR ((new.renewed_at <= now()) AND (new.renewed_at > (now() - '7 days'::interval)))) AND (((old.status = 'running'::fleet.run_status) AND (new.status = 'running'::fleet.run_status) AND (new.attempts = old.attempts) AND (NOT (new.locked_by IS DISTINCT FROM old.locked_by)) AND (new.locked_until <= (now() + '7 days'::interval)) AND (new.failures = old.failures) AND (new.run_after = old.run_after) AND (NOT (new.finished_at IS DISTINCT FROM old.finished_at)) AND ((new.start_by IS NULL) OR (new.start_by = old.start_by)) AND COALESCE((new.started_at <= now()), true)) OR ((new.status = 'running'::fleet.run_status) AND (new.attempts = (old.attempts + 1)) AND (((old.status = 'pending'::fleet.run_status) AND (old.run_after <= now()) AND ((old.start_by IS NULL) OR (old.start_by >= now())) AND (new.failures = old.failures)) OR ((old.status = 'running'::fleet.run_status) AND (old.locked_until < now()) AND ((new.failures = old.failures) OR (new.failures = (old.failures + 1))))) AND (new.locked_by IS NOT NULL) AND (new.locked_until <= (now() + '7 days'::interval)) AND (new.start_by IS NULL) AND (new.run_after = old.run_after) AND (NOT (new.finished_at IS DISTINCT FROM old.finished_at)) AND COALESCE((new.started_at <= now()), true)) OR ((old.status = 'pending'::fleet.run_status) AND (new.status = 'skipped'::fleet.run_status) AND (old.overlap = 'skip'::text) AND (old.attempts = 0) AND (new.attempts = 0) AND (old.run_after <= now()) AND (new.failures = old.failures) AND (new.run_after = old.run_after) AND (new.finished_at <= now()) AND (NOT (new.locked_until IS DISTINCT FROM old.locked_until)) AND (new.start_by IS NULL)) OR ((old.status = 'running'::fleet.run_status) AND (new.status = ANY (ARRAY['done'::fleet.run_status, 'dead'::fleet.run_status, 'pending'::fleet.run_status])) AND (new.attempts = old.attempts) AND (new.locked_until IS NULL) AND (new.locked_by IS NULL) AND ((new.failures = old.failures) OR (new.failures = (old.failures + 1))) AND ((new.start_by IS NULL) OR (new.start_by = old.start_by)) AND
        CASE
            WHEN (new.status = 'pending'::fleet.run_status) THEN ((new.finished_at IS NULL) AND (new.run_after <= (now() + '1 day'::interval)))
            ELSE ((new.finished_at <= now()) AND (new.run_after = old.run_after))
        END))) IS NOT TRUE))) EXECUTE FUNCTION fleet.job_runs_worker_rules();
ALTER TABLE fleet.job_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_operator_all ON fleet.job_runs FOR ALL TO fleet_operator USING (true) WITH CHECK (true);
CREATE POLICY fleet_read ON fleet.job_runs FOR SELECT TO public USING (true);
CREATE POLICY fleet_ticker_materialize ON fleet.job_runs FOR INSERT TO fleet_ticker WITH CHECK (((origin = 'schedule'::text) AND (status = ANY (ARRAY['pending'::fleet.run_status, 'skipped'::fleet.run_status])) AND (attempts = 0) AND (run_after = scheduled_for) AND (scheduled_for <= (now() + '7 days'::interval)) AND (EXISTS ( SELECT 1
   FROM fleet.schedules s
  WHERE ((s.name = job_runs.schedule_name) AND (s.job = job_runs.job) AND (s.args = job_runs.args) AND (s.overlap = job_runs.overlap) AND (job_runs.scheduled_for >= s.next_run_at))))));
CREATE POLICY fleet_ticker_retention ON fleet.job_runs FOR DELETE TO fleet_ticker USING ((status = ANY (ARRAY['done'::fleet.run_status, 'skipped'::fleet.run_status])));
CREATE POLICY fleet_ticker_settle ON fleet.job_runs FOR UPDATE TO fleet_ticker USING (((start_by IS NOT NULL) AND (status = 'pending'::fleet.run_status) AND (attempts = 0) AND (origin = 'schedule'::text))) WITH CHECK (((start_by IS NULL) AND (status = ANY (ARRAY['pending'::fleet.run_status, 'skipped'::fleet.run_status])) AND (attempts = 0)));
CREATE POLICY fleet_worker_update ON fleet.job_runs FOR UPDATE TO fleet_worker USING (true) WITH CHECK (true);
GRANT SELECT ON fleet.job_runs TO fleet_alert;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.job_runs TO fleet_operator;
GRANT SELECT ON fleet.job_runs TO fleet_reader;
GRANT DELETE, INSERT, SELECT ON fleet.job_runs TO fleet_ticker;
GRANT SELECT ON fleet.job_runs TO fleet_worker;
GRANT UPDATE (finished_at, last_error, run_window, start_by, status) ON fleet.job_runs TO fleet_ticker;
GRANT UPDATE (attempts, failures, finished_at, last_error, last_outcome, locked_by, locked_host, locked_pid, locked_until, renewed_at, result, run_after, run_window, span_id, start_by, started_at, status, trace_id, traced) ON fleet.job_runs TO fleet_worker;

CREATE TABLE fleet.migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT migrations_pkey PRIMARY KEY (version)
);
GRANT SELECT ON fleet.migrations TO fleet_alert;
GRANT SELECT ON fleet.migrations TO fleet_operator;
GRANT SELECT ON fleet.migrations TO fleet_reader;
GRANT SELECT ON fleet.migrations TO fleet_ticker;
GRANT SELECT ON fleet.migrations TO fleet_worker;

CREATE TABLE fleet.processes (
    id text NOT NULL,
    kind text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    jobs text[] NOT NULL DEFAULT '{}'::text[],
    running integer NOT NULL DEFAULT 0,
    started_at timestamp with time zone NOT NULL DEFAULT now(),
    seen_at timestamp with time zone NOT NULL DEFAULT now(),
    crashes integer NOT NULL DEFAULT 0,
    crashed_at timestamp with time zone,
    last_error text,
    CONSTRAINT fleet_processes_kind_check CHECK ((kind = ANY (ARRAY['ticker'::text, 'worker'::text]))),
    CONSTRAINT processes_time_range CHECK (((started_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (started_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (seen_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (seen_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (crashed_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (crashed_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT fleet_processes_pkey PRIMARY KEY (id)
);
ALTER TABLE fleet.processes ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_operator_all ON fleet.processes FOR ALL TO fleet_operator USING (true) WITH CHECK (true);
CREATE POLICY fleet_read ON fleet.processes FOR SELECT TO public USING (true);
CREATE POLICY fleet_ticker_process ON fleet.processes FOR ALL TO fleet_ticker USING ((kind = 'ticker'::text)) WITH CHECK ((kind = 'ticker'::text));
CREATE POLICY fleet_worker_process ON fleet.processes FOR ALL TO fleet_worker USING ((kind = 'worker'::text)) WITH CHECK ((kind = 'worker'::text));
GRANT SELECT ON fleet.processes TO fleet_alert;
GRANT DELETE, SELECT ON fleet.processes TO fleet_operator;
GRANT SELECT ON fleet.processes TO fleet_reader;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.processes TO fleet_ticker;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.processes TO fleet_worker;

CREATE TABLE fleet.schedule_audit (
    id bigint NOT NULL,
    at timestamp with time zone NOT NULL DEFAULT now(),
    role text NOT NULL DEFAULT CURRENT_USER,
    by_name text,
    action text NOT NULL,
    schedule text,
    note text,
    details jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT schedule_audit_action_check CHECK ((action = ANY (ARRAY['pause'::text, 'resume'::text, 'trigger'::text, 'retry'::text, 'discard'::text, 'backfill'::text, 'apply'::text]))),
    CONSTRAINT schedule_audit_by_name_check CHECK (((by_name IS NULL) OR ((char_length(by_name) >= 1) AND (char_length(by_name) <= 100)))),
    CONSTRAINT schedule_audit_details_check CHECK ((octet_length((details)::text) <= 16384)),
    CONSTRAINT schedule_audit_note_check CHECK (((note IS NULL) OR (char_length(note) <= 500))),
    CONSTRAINT schedule_audit_schedule_check CHECK ((char_length(schedule) <= 200)),
    CONSTRAINT schedule_audit_time_range CHECK (((at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT schedule_audit_pkey PRIMARY KEY (id)
);
CREATE INDEX schedule_audit_at ON fleet.schedule_audit USING btree (at, id);
CREATE INDEX schedule_audit_schedule ON fleet.schedule_audit USING btree (schedule, at DESC, id DESC);
ALTER TABLE fleet.schedule_audit ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_operator_add ON fleet.schedule_audit FOR INSERT TO fleet_operator WITH CHECK (true);
CREATE POLICY fleet_read ON fleet.schedule_audit FOR SELECT TO public USING (true);
CREATE POLICY fleet_ticker_retention ON fleet.schedule_audit FOR DELETE TO fleet_ticker USING ((at < (now() - '01:00:00'::interval)));
GRANT SELECT ON fleet.schedule_audit TO fleet_alert;
GRANT SELECT ON fleet.schedule_audit TO fleet_operator;
GRANT SELECT ON fleet.schedule_audit TO fleet_reader;
GRANT DELETE, SELECT ON fleet.schedule_audit TO fleet_ticker;
GRANT SELECT ON fleet.schedule_audit TO fleet_worker;
GRANT INSERT (action, by_name, details, note, schedule) ON fleet.schedule_audit TO fleet_operator;

CREATE TABLE fleet.schedule_gates (
    name text NOT NULL,
    running_slot timestamp with time zone,
    CONSTRAINT schedule_gates_time_range CHECK (((running_slot >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (running_slot < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT schedule_gates_name_fkey FOREIGN KEY (name) REFERENCES fleet.schedules(name) ON DELETE CASCADE,
    CONSTRAINT schedule_gates_pkey PRIMARY KEY (name)
);
ALTER TABLE fleet.schedule_gates ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_operator_all ON fleet.schedule_gates FOR ALL TO fleet_operator USING (true) WITH CHECK (true);
CREATE POLICY fleet_read ON fleet.schedule_gates FOR SELECT TO public USING (true);
CREATE POLICY fleet_worker_gate ON fleet.schedule_gates FOR ALL TO fleet_worker USING (true) WITH CHECK (((running_slot IS NULL) OR (EXISTS ( SELECT 1
   FROM fleet.job_runs r
  WHERE ((r.schedule_name = schedule_gates.name) AND (r.scheduled_for = schedule_gates.running_slot) AND (r.status = ANY (ARRAY['pending'::fleet.run_status, 'running'::fleet.run_status])))))));
GRANT SELECT ON fleet.schedule_gates TO fleet_alert;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.schedule_gates TO fleet_operator;
GRANT SELECT ON fleet.schedule_gates TO fleet_reader;
GRANT SELECT ON fleet.schedule_gates TO fleet_ticker;
GRANT INSERT, SELECT, UPDATE ON fleet.schedule_gates TO fleet_worker;

CREATE TABLE fleet.schedule_stats (
    name text NOT NULL,
    last_success_slot timestamp with time zone,
    last_success_at timestamp with time zone,
    last_slot timestamp with time zone,
    last_status fleet.run_status,
    last_outcome text,
    last_finished_at timestamp with time zone,
    last_error text,
    dirty integer NOT NULL DEFAULT 0,
    CONSTRAINT schedule_stats_time_range CHECK (((last_success_slot >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (last_success_slot < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (last_success_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (last_success_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (last_slot >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (last_slot < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (last_finished_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (last_finished_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT schedule_stats_name_fkey FOREIGN KEY (name) REFERENCES fleet.schedules(name) ON DELETE CASCADE,
    CONSTRAINT schedule_stats_pkey PRIMARY KEY (name)
);
ALTER TABLE fleet.schedule_stats SET (fillfactor=50);
CREATE INDEX schedule_stats_dirty ON fleet.schedule_stats USING btree (name) WHERE (dirty > 0);
GRANT SELECT ON fleet.schedule_stats TO fleet_alert;
GRANT SELECT ON fleet.schedule_stats TO fleet_operator;
GRANT SELECT ON fleet.schedule_stats TO fleet_reader;
GRANT INSERT, SELECT, UPDATE ON fleet.schedule_stats TO fleet_ticker;
GRANT SELECT ON fleet.schedule_stats TO fleet_worker;
GRANT UPDATE (dirty) ON fleet.schedule_stats TO fleet_operator;

CREATE TABLE fleet.schedules (
    name text NOT NULL,
    every interval,
    cron text,
    timezone text NOT NULL DEFAULT 'UTC'::text,
    start_at timestamp with time zone,
    dst_repeated text NOT NULL DEFAULT 'first'::text,
    dst_missing text NOT NULL DEFAULT 'shift'::text,
    job text NOT NULL,
    args jsonb NOT NULL DEFAULT '{}'::jsonb,
    catchup text NOT NULL DEFAULT 'latest'::text,
    max_lateness interval,
    grace interval,
    overlap text NOT NULL DEFAULT 'skip'::text,
    timeout interval,
    max_attempts integer NOT NULL DEFAULT 6,
    retry_base interval NOT NULL DEFAULT '00:00:30'::interval,
    retry_cap interval NOT NULL DEFAULT '00:15:00'::interval,
    enabled boolean NOT NULL DEFAULT true,
    paused_at timestamp with time zone,
    next_run_at timestamp with time zone,
    missed_slots bigint NOT NULL DEFAULT 0,
    timing_hash text NOT NULL,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    updated_at timestamp with time zone NOT NULL DEFAULT now(),
    pause_note text,
    max_catchup integer NOT NULL DEFAULT 1000,
    retention interval,
    cadence_from timestamp with time zone,
    cadence_mid timestamp with time zone,
    cadence_until timestamp with time zone,
    cadence_hash text,
    cadence_gap interval,
    broken_at timestamp with time zone,
    broken_error text,
    deadline interval,
    spread interval,
    spread_offset interval NOT NULL DEFAULT '00:00:00'::interval,
    calendar jsonb,
    CONSTRAINT schedules_calendar_size CHECK (((calendar IS NULL) OR (octet_length((calendar)::text) <= 65536))) NOT VALID,
    CONSTRAINT schedules_catchup_check CHECK ((catchup = ANY (ARRAY['skip'::text, 'latest'::text, 'all'::text]))),
    CONSTRAINT schedules_check CHECK (((every IS NULL) <> (cron IS NULL))),
    CONSTRAINT schedules_deadline_check CHECK ((deadline > '00:00:00'::interval)),
    CONSTRAINT schedules_dst_missing_check CHECK ((dst_missing = ANY (ARRAY['shift'::text, 'skip'::text]))),
    CONSTRAINT schedules_dst_repeated_check CHECK ((dst_repeated = ANY (ARRAY['first'::text, 'last'::text]))),
    CONSTRAINT schedules_every_check CHECK ((every > '00:00:00'::interval)),
    CONSTRAINT schedules_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT schedules_max_catchup_check CHECK (((max_catchup >= 1) AND (max_catchup <= 100000))),
    CONSTRAINT schedules_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$'::text)),
    CONSTRAINT schedules_overlap_check CHECK ((overlap = ANY (ARRAY['allow'::text, 'skip'::text, 'queue'::text]))),
    CONSTRAINT schedules_retention_check CHECK ((retention > '00:00:00'::interval)),
    CONSTRAINT schedules_spread_offset CHECK (((spread_offset >= '00:00:00'::interval) AND (spread_offset < '3660 days'::interval))) NOT VALID,
    CONSTRAINT schedules_time_range CHECK (((start_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (start_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (paused_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (paused_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (next_run_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (next_run_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (created_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (created_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (updated_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (updated_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_from >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_from < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_mid >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_mid < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_until >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_until < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (broken_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (broken_at < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (cadence_gap > '00:00:00'::interval) AND (cadence_gap <= '146097 days'::interval))) NOT VALID,
    CONSTRAINT schedules_pkey PRIMARY KEY (name)
);
ALTER TABLE fleet.schedules SET (autovacuum_vacuum_scale_factor=0.05);
CREATE INDEX schedules_cadence_expiry ON fleet.schedules USING btree (COALESCE(cadence_mid, cadence_until, '-infinity'::timestamp with time zone)) WHERE (cron IS NOT NULL);
CREATE INDEX schedules_cadence_outdated ON fleet.schedules USING btree (name) WHERE ((cron IS NOT NULL) AND (cadence_hash IS DISTINCT FROM timing_hash));
CREATE INDEX schedules_deadline ON fleet.schedules USING btree (name) WHERE (deadline IS NOT NULL);
CREATE INDEX schedules_due ON fleet.schedules USING btree (next_run_at) WHERE (enabled AND (paused_at IS NULL));
CREATE TRIGGER schedules_ticker_rules AFTER UPDATE ON fleet.schedules FOR EACH ROW WHEN ((row_security_active(('fleet.schedules'::regclass)::oid) AND pg_has_role('fleet_ticker'::name, 'USAGE'::text) AND ((((NOT (new.next_run_at IS DISTINCT FROM old.next_run_at)) OR ((new.next_run_at > old.next_run_at) AND (new.next_run_at <= ((now() + '7 days'::interval) + COALESCE(new.every, '02:00:00'::interval))))) AND (new.missed_slots >= old.missed_slots) AND ((NOT (new.broken_at IS DISTINCT FROM old.broken_at)) OR (new.broken_at IS NULL) OR (new.broken_at <= now())) AND (NOT (new.cadence_gap IS DISTINCT FROM old.cadence_gap)) AND (NOT (new.cadence_from IS DISTINCT FROM old.cadence_from)) AND (NOT (new.cadence_mid IS DISTINCT FROM old.cadence_mid)) AND (NOT (new.cadence_until IS DISTINCT FROM old.cadence_until))) IS NOT TRUE))) EXECUTE FUNCTION fleet.schedules_ticker_rules();
ALTER TABLE fleet.schedules ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_operator_all ON fleet.schedules FOR ALL TO fleet_operator USING (true) WITH CHECK (true);
CREATE POLICY fleet_read ON fleet.schedules FOR SELECT TO public USING (true);
CREATE POLICY fleet_ticker_advance ON fleet.schedules FOR UPDATE TO fleet_ticker USING (true) WITH CHECK (true);
GRANT SELECT ON fleet.schedules TO fleet_alert;
GRANT DELETE, INSERT, SELECT, UPDATE ON fleet.schedules TO fleet_operator;
GRANT SELECT ON fleet.schedules TO fleet_reader;
GRANT SELECT ON fleet.schedules TO fleet_ticker;
GRANT SELECT ON fleet.schedules TO fleet_worker;
GRANT UPDATE (broken_at, broken_error, cadence_from, cadence_gap, cadence_hash, cadence_mid, cadence_until, missed_slots, next_run_at) ON fleet.schedules TO fleet_ticker;

CREATE TABLE fleet.slot_outcomes (
    id bigint NOT NULL,
    schedule_name text NOT NULL,
    first_slot timestamp with time zone NOT NULL,
    last_slot timestamp with time zone NOT NULL,
    slots integer NOT NULL,
    records bytea NOT NULL,
    removed_at timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT slot_outcomes_check CHECK ((octet_length(records) = (16 * slots))),
    CONSTRAINT slot_outcomes_check1 CHECK ((first_slot <= last_slot)),
    CONSTRAINT slot_outcomes_slots_check CHECK ((slots > 0)),
    CONSTRAINT slot_outcomes_time_range CHECK (((first_slot >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (first_slot < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (last_slot >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (last_slot < '9000-01-01 00:00:00+00'::timestamp with time zone) AND (removed_at >= '1000-01-01 00:00:00+00'::timestamp with time zone) AND (removed_at < '9000-01-01 00:00:00+00'::timestamp with time zone))) NOT VALID,
    CONSTRAINT slot_outcomes_pkey PRIMARY KEY (id)
);
CREATE INDEX slot_outcomes_age ON fleet.slot_outcomes USING btree (last_slot);
CREATE INDEX slot_outcomes_schedule ON fleet.slot_outcomes USING btree (schedule_name, last_slot);
GRANT SELECT ON fleet.slot_outcomes TO fleet_alert;
GRANT SELECT ON fleet.slot_outcomes TO fleet_operator;
GRANT SELECT ON fleet.slot_outcomes TO fleet_reader;
GRANT DELETE, SELECT ON fleet.slot_outcomes TO fleet_ticker;
GRANT SELECT ON fleet.slot_outcomes TO fleet_worker;

CREATE OR REPLACE FUNCTION fleet.job_runs_worker_rules()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION fleet.ledger_code(status fleet.run_status, attempts integer, last_outcome text, last_error text, origin text, lease_expired boolean)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
SELECT least(attempts, 16777215)::bigint * 256
       + CASE WHEN status = 'done' THEN CASE WHEN attempts > 1 AND lease_expired THEN 2 ELSE 1 END
              WHEN status = 'dead' THEN 3
              WHEN status = 'pending' THEN 4
              WHEN status = 'running' THEN 5
              WHEN last_outcome = 'discarded' THEN 9
              WHEN last_error LIKE 'catchup %' THEN 6
              WHEN last_error LIKE 'max_lateness:%' THEN 7
              WHEN last_error LIKE 'overlap:%' THEN 8
              ELSE 10 END
       + CASE WHEN origin = 'schedule' THEN 0 ELSE 16 END
$function$;

CREATE OR REPLACE FUNCTION fleet.previous_success(run_schedule text, run_slot timestamp with time zone, run_attempts integer)
 RETURNS TABLE(found jsonb)
 LANGUAGE sql
 STABLE ROWS 1
AS $function$
    SELECT jsonb_build_object('previous_slot', p.scheduled_for, 'previous_result', p.result)
    FROM fleet.job_runs p
    WHERE run_attempts = 0 AND p.schedule_name = run_schedule AND p.scheduled_for < run_slot
      AND p.status = 'done'
    ORDER BY p.scheduled_for DESC
    LIMIT 1
$function$;

CREATE OR REPLACE FUNCTION fleet.runs_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF coalesce(current_setting('fleet.keep_outcomes', true), '') <> 'off' THEN
        INSERT INTO fleet.slot_outcomes (schedule_name, first_slot, last_slot, slots, records)
        SELECT g.schedule_name, min(g.scheduled_for), max(g.scheduled_for), count(*),
               string_agg(timestamptz_send(g.scheduled_for)
                          || int8send(fleet.ledger_code(g.status, g.attempts, g.last_outcome, g.last_error,
                                                        g.origin,
                                                        EXISTS (SELECT 1 FROM fleet.job_attempts a
                                                                WHERE a.schedule_name = g.schedule_name
                                                                  AND a.scheduled_for = g.scheduled_for
                                                                  AND a.outcome = 'lease_expired'))),
                          ''::bytea ORDER BY g.scheduled_for)
        FROM gone g
        WHERE g.status IN ('done', 'skipped', 'dead')
        GROUP BY g.schedule_name;
    END IF;
    DELETE FROM fleet.job_attempts a
    USING gone g
    WHERE a.schedule_name = g.schedule_name AND a.scheduled_for = g.scheduled_for;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION fleet.schedules_ticker_rules()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION fleet.timing_longest_gap(every interval, cron text, dst_missing text)
 RETURNS interval
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
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
$function$;
