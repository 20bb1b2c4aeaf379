-- Schedules, one row per slot, and the history of attempts.

CREATE TYPE fleet_run_status AS ENUM ('pending', 'running', 'done', 'dead', 'skipped');

CREATE TABLE schedules (
    name               text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$'),
    every              interval CHECK (every > interval '0'),
    cron               text,
    timezone           text NOT NULL DEFAULT 'UTC',
    start_at           timestamptz,
    dst_repeated       text NOT NULL DEFAULT 'first' CHECK (dst_repeated IN ('first', 'last')),
    dst_missing        text NOT NULL DEFAULT 'shift' CHECK (dst_missing IN ('shift', 'skip')),
    job                text NOT NULL,
    args               jsonb NOT NULL DEFAULT '{}'::jsonb,
    catchup            text NOT NULL DEFAULT 'latest' CHECK (catchup IN ('skip', 'latest', 'all')),
    max_lateness       interval,
    grace              interval,
    overlap            text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('allow', 'skip', 'queue')),
    timeout            interval,
    max_attempts       integer NOT NULL DEFAULT 6 CHECK (max_attempts >= 1),
    retry_base         interval NOT NULL DEFAULT '30 seconds',
    retry_cap          interval NOT NULL DEFAULT '15 minutes',
    enabled            boolean NOT NULL DEFAULT true,
    paused_at          timestamptz,
    next_run_at        timestamptz,
    -- The slot that holds the schedule when overlap is 'skip' or 'queue': set when a run of the
    -- schedule is first claimed, cleared when that run ends. Kept on this row (not derived from
    -- job_runs) so that concurrent claimers serialise on the row lock and re-check it.
    running_slot       timestamptz,
    missed_slots       bigint NOT NULL DEFAULT 0,
    timing_hash        text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CHECK ((every IS NULL) <> (cron IS NULL))
);

CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled AND paused_at IS NULL;

CREATE TABLE job_runs (
    schedule_name      text NOT NULL REFERENCES schedules (name) ON DELETE CASCADE,
    scheduled_for      timestamptz NOT NULL,
    job                text NOT NULL,
    args               jsonb NOT NULL DEFAULT '{}'::jsonb,
    overlap            text NOT NULL DEFAULT 'allow',
    origin             text NOT NULL DEFAULT 'schedule' CHECK (origin IN ('schedule', 'trigger', 'backfill')),
    status             fleet_run_status NOT NULL DEFAULT 'pending',
    -- The fencing token: incremented by every claim; every later write of that attempt is
    -- conditioned on it, so a worker whose lease was taken over matches zero rows.
    attempts           integer NOT NULL DEFAULT 0,
    -- Attempts that spent the retry budget (errors, timeouts, lost leases); hand-backs do not.
    failures           integer NOT NULL DEFAULT 0,
    run_after          timestamptz NOT NULL,
    locked_by          text,
    locked_host        text,
    locked_pid         integer,
    locked_until       timestamptz,
    started_at         timestamptz,
    finished_at        timestamptz,
    last_error         text,
    -- How the latest attempt ended, so the next one can say why it exists (tracing link reason).
    last_outcome       text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    created_trace_id   text,
    created_span_id    text,
    trace_id           text,
    span_id            text,
    PRIMARY KEY (schedule_name, scheduled_for)
);

-- Claim path: only unfinished rows are indexed, so millions of finished rows cost nothing.
CREATE INDEX job_runs_pending ON job_runs (run_after) WHERE status = 'pending';
CREATE INDEX job_runs_leases ON job_runs (locked_until) WHERE status = 'running';
CREATE INDEX job_runs_open ON job_runs (schedule_name, scheduled_for) WHERE status IN ('pending', 'running');
CREATE INDEX job_runs_finished ON job_runs (finished_at) WHERE status IN ('done', 'dead', 'skipped');
CREATE INDEX job_runs_dead ON job_runs (schedule_name) WHERE status = 'dead';

-- One row per ended attempt, written when it ends: by its worker (finished, failed, timed out,
-- handed back), or, for an attempt whose worker died, by the worker that reclaims the run.
CREATE TABLE job_attempts (
    schedule_name      text NOT NULL,
    scheduled_for      timestamptz NOT NULL,
    attempt            integer NOT NULL,
    worker_id          text NOT NULL,
    host               text,
    pid                integer,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz,
    outcome            text,
    error              text,
    trace_id           text,
    span_id            text,
    PRIMARY KEY (schedule_name, scheduled_for, attempt),
    FOREIGN KEY (schedule_name, scheduled_for) REFERENCES job_runs (schedule_name, scheduled_for)
        ON DELETE CASCADE
);

-- Live tickers and workers, kept fresh by each process; gone processes age out.
CREATE TABLE fleet_processes (
    id                 text PRIMARY KEY,
    kind               text NOT NULL CHECK (kind IN ('ticker', 'worker')),
    host               text NOT NULL,
    pid                integer NOT NULL,
    jobs               text[] NOT NULL DEFAULT '{}',
    running            integer NOT NULL DEFAULT 0,
    started_at         timestamptz NOT NULL DEFAULT now(),
    seen_at            timestamptz NOT NULL DEFAULT now()
);
