-- The schema `fleet` as migrations build it, in canonical form (generated: python -m
-- tests.schema_snapshot > schema.sql). A test checks that migrating an empty database yields it.
CREATE TYPE fleet.run_status AS ENUM ('pending', 'running', 'done', 'dead', 'skipped');

CREATE TABLE fleet.chores (
    name text NOT NULL,
    due_at timestamp with time zone NOT NULL DEFAULT now(),
    mark timestamp with time zone,
    cursor text,
    steps bigint NOT NULL DEFAULT 0,
    stepped_at timestamp with time zone,
    CONSTRAINT chores_pkey PRIMARY KEY (name)
);

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
    CONSTRAINT job_attempts_pkey PRIMARY KEY (schedule_name, scheduled_for, attempt)
);

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
    CONSTRAINT job_runs_finite_times CHECK ((isfinite(scheduled_for) AND isfinite(run_after) AND isfinite(locked_until) AND isfinite(started_at) AND isfinite(finished_at))) NOT VALID,
    CONSTRAINT job_runs_origin_check CHECK ((origin = ANY (ARRAY['schedule'::text, 'trigger'::text, 'backfill'::text]))),
    CONSTRAINT job_runs_start_by_finite CHECK (isfinite(start_by)) NOT VALID,
    CONSTRAINT job_runs_schedule_name_fkey FOREIGN KEY (schedule_name) REFERENCES fleet.schedules(name) ON DELETE CASCADE,
    CONSTRAINT job_runs_pkey PRIMARY KEY (schedule_name, scheduled_for)
);
ALTER TABLE fleet.job_runs SET (autovacuum_analyze_scale_factor=0, autovacuum_analyze_threshold=5000, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=5000);
CREATE INDEX job_runs_dead ON fleet.job_runs USING btree (schedule_name) WHERE (status = 'dead'::fleet.run_status);
CREATE INDEX job_runs_finished ON fleet.job_runs USING btree (finished_at) WHERE (status = ANY (ARRAY['done'::fleet.run_status, 'dead'::fleet.run_status, 'skipped'::fleet.run_status]));
CREATE INDEX job_runs_leases ON fleet.job_runs USING btree (locked_until) WHERE (status = 'running'::fleet.run_status);
CREATE INDEX job_runs_open ON fleet.job_runs USING btree (schedule_name, scheduled_for) WHERE (status = ANY (ARRAY['pending'::fleet.run_status, 'running'::fleet.run_status]));
CREATE INDEX job_runs_pending ON fleet.job_runs USING btree (job, run_after) WHERE (status = 'pending'::fleet.run_status);
CREATE INDEX job_runs_start_by ON fleet.job_runs USING btree (start_by) WHERE (start_by IS NOT NULL);
CREATE TRIGGER job_runs_delete_attempts AFTER DELETE ON fleet.job_runs REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION fleet.delete_attempts();

CREATE TABLE fleet.migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT migrations_pkey PRIMARY KEY (version)
);

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
    CONSTRAINT fleet_processes_pkey PRIMARY KEY (id)
);

CREATE TABLE fleet.schedule_gates (
    name text NOT NULL,
    running_slot timestamp with time zone,
    CONSTRAINT schedule_gates_name_fkey FOREIGN KEY (name) REFERENCES fleet.schedules(name) ON DELETE CASCADE,
    CONSTRAINT schedule_gates_pkey PRIMARY KEY (name)
);

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
    CONSTRAINT schedule_stats_name_fkey FOREIGN KEY (name) REFERENCES fleet.schedules(name) ON DELETE CASCADE,
    CONSTRAINT schedule_stats_pkey PRIMARY KEY (name)
);
ALTER TABLE fleet.schedule_stats SET (fillfactor=50);
CREATE INDEX schedule_stats_dirty ON fleet.schedule_stats USING btree (name) WHERE (dirty > 0);

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
    CONSTRAINT schedules_catchup_check CHECK ((catchup = ANY (ARRAY['skip'::text, 'latest'::text, 'all'::text]))),
    CONSTRAINT schedules_check CHECK (((every IS NULL) <> (cron IS NULL))),
    CONSTRAINT schedules_dst_missing_check CHECK ((dst_missing = ANY (ARRAY['shift'::text, 'skip'::text]))),
    CONSTRAINT schedules_dst_repeated_check CHECK ((dst_repeated = ANY (ARRAY['first'::text, 'last'::text]))),
    CONSTRAINT schedules_every_check CHECK ((every > '00:00:00'::interval)),
    CONSTRAINT schedules_finite_times CHECK ((isfinite(next_run_at) AND isfinite(start_at) AND isfinite(paused_at) AND isfinite(broken_at))) NOT VALID,
    CONSTRAINT schedules_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT schedules_max_catchup_check CHECK (((max_catchup >= 1) AND (max_catchup <= 100000))),
    CONSTRAINT schedules_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$'::text)),
    CONSTRAINT schedules_overlap_check CHECK ((overlap = ANY (ARRAY['allow'::text, 'skip'::text, 'queue'::text]))),
    CONSTRAINT schedules_retention_check CHECK ((retention > '00:00:00'::interval)),
    CONSTRAINT schedules_pkey PRIMARY KEY (name)
);
ALTER TABLE fleet.schedules SET (autovacuum_vacuum_scale_factor=0.05);
CREATE INDEX schedules_cadence_expiry ON fleet.schedules USING btree (COALESCE(cadence_mid, cadence_until, '-infinity'::timestamp with time zone)) WHERE (cron IS NOT NULL);
CREATE INDEX schedules_cadence_outdated ON fleet.schedules USING btree (name) WHERE ((cron IS NOT NULL) AND (cadence_hash IS DISTINCT FROM timing_hash));
CREATE INDEX schedules_due ON fleet.schedules USING btree (next_run_at) WHERE (enabled AND (paused_at IS NULL));

CREATE OR REPLACE FUNCTION fleet.delete_attempts()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    DELETE FROM fleet.job_attempts a
    USING gone g
    WHERE a.schedule_name = g.schedule_name AND a.scheduled_for = g.scheduled_for;
    RETURN NULL;
END
$function$;
