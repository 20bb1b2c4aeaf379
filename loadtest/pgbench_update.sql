-- One single-row update by primary key on fleet.job_runs per transaction: the commit rate the server allows.
-- pgbench -n -M prepared -D rows=10000 -f pgbench_update.sql
\set k random(1, :rows)
UPDATE fleet.job_runs SET locked_until = now()
WHERE schedule_name = 'bench' AND scheduled_for = '2026-01-01 00:00:00+00'::timestamptz + make_interval(secs => :k);
