-- The load test's own tables, created by the load test in its database (not a fleet migration):
-- the ledger its job writes, every handler start, and what the run did (settings, faults, memory).

-- The idempotency guard: the job's INSERT ... ON CONFLICT DO NOTHING under the slot's key.
CREATE TABLE loadtest_ledger_keys (
    idempotency_key  text PRIMARY KEY
);

-- The side effect. Its key is deliberately NOT unique: an effect applied twice for one slot (two
-- attempts given different keys, or a write that bypassed the key) stays visible as a second row.
CREATE TABLE loadtest_ledger (
    id               bigserial PRIMARY KEY,
    idempotency_key  text NOT NULL,
    schedule_name    text NOT NULL,
    scheduled_for    timestamptz NOT NULL,
    attempt          integer NOT NULL,
    worker_id        text NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX loadtest_ledger_key ON loadtest_ledger (idempotency_key);
CREATE INDEX loadtest_ledger_slot ON loadtest_ledger (schedule_name, scheduled_for);

-- Every handler start. started_at: when the handler was entered, in the database's clock (the time
-- of this row's insert less the handler's own time from entry to the insert, a pause included).
-- outcome: applied | already (the key was there: the repeat was absorbed) | transient | permanent |
-- cancelled; NULL when the execution never said (killed or stalled).
CREATE TABLE loadtest_executions (
    id               bigserial PRIMARY KEY,
    idempotency_key  text NOT NULL,
    schedule_name    text NOT NULL,
    scheduled_for    timestamptz NOT NULL,
    attempt          integer NOT NULL,
    worker_id        text NOT NULL,
    pid              integer NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz,
    outcome          text
);
CREATE INDEX loadtest_executions_key ON loadtest_executions (idempotency_key);

-- The run: its settings and its window [window_start, window_end]; slots due are computed from it.
CREATE TABLE loadtest_meta (
    id               integer PRIMARY KEY CHECK (id = 1),
    settings         jsonb NOT NULL,
    window_start     timestamptz NOT NULL,
    window_end       timestamptz,
    drained_at       timestamptz,
    drain_note       text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- Each fault injected: kind worker_kill | zombie | ticker_kill | pg_restart | starvation, its
-- target, when it began and ended, and the runs the target held (from fleet.job_runs.locked_by).
CREATE TABLE loadtest_faults (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL,
    target           text,
    pid              integer,
    at               timestamptz NOT NULL,
    ended_at         timestamptz,
    held             jsonb NOT NULL DEFAULT '[]'::jsonb,
    detail           jsonb NOT NULL DEFAULT '{}'::jsonb
);

-- Peak resident memory (VmHWM) of each fleet process the run started.
CREATE TABLE loadtest_processes (
    name             text NOT NULL,
    pid              integer NOT NULL,
    kind             text NOT NULL,
    peak_rss_kb      bigint NOT NULL,
    PRIMARY KEY (name, pid)
);
