-- Whether an attempt was traced. Every claim makes trace and span ids (log lines carry them, and a
-- worker that reclaims a run needs them to emit the lost attempt's span), but only a worker with
-- tracing on exports a span under them: `fleetctl show` and `trace` link to Jaeger for those only.
-- Rows from before this column count as untraced: nothing recorded whether they were.
ALTER TABLE fleet.job_runs ADD COLUMN IF NOT EXISTS traced boolean NOT NULL DEFAULT false;
ALTER TABLE fleet.job_attempts ADD COLUMN IF NOT EXISTS traced boolean NOT NULL DEFAULT false;
