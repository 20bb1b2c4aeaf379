-- Read-only statements of `fleetctl up`: its start-up checks and its live view (whose verdicts
-- come from `fleetctl status`). It reads unfinished runs, dead runs and the last hour, through indexes.

-- name: schedule_count
SELECT count(*) AS n FROM fleet.schedules

-- name: schedule_jobs
-- The jobs enabled schedules run, each with the schedules that name it.
SELECT job, array_agg(name ORDER BY name) AS schedules
FROM fleet.schedules WHERE enabled GROUP BY job ORDER BY job

-- name: schedule_overview
SELECT s.name, s.job,
       extract(epoch FROM s.next_run_at - now())::float8 AS next_in_s,
       last.status::text AS last_status,
       extract(epoch FROM now() - last.scheduled_for)::float8 AS last_ago_s,
       open.pending, open.running,
       recent.done, recent.skipped, dead.dead, tries.retried
FROM fleet.schedules s
LEFT JOIN LATERAL (
    SELECT r.scheduled_for, r.status FROM fleet.job_runs r
    WHERE r.schedule_name = s.name AND r.scheduled_for <= now()
    ORDER BY r.scheduled_for DESC LIMIT 1
) last ON true
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.status = 'pending') AS pending,
           count(*) FILTER (WHERE r.status = 'running') AS running
    FROM fleet.job_runs r
    WHERE r.schedule_name = s.name AND r.status IN ('pending', 'running')
) open
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.status = 'done') AS done,
           count(*) FILTER (WHERE r.status = 'skipped') AS skipped
    FROM fleet.job_runs r
    WHERE r.schedule_name = s.name AND r.scheduled_for > now() - interval '1 hour'
) recent
CROSS JOIN LATERAL (
    SELECT count(*) AS dead FROM fleet.job_runs r WHERE r.schedule_name = s.name AND r.status = 'dead'
) dead
CROSS JOIN LATERAL (
    SELECT count(*) AS retried FROM fleet.job_attempts a
    WHERE a.schedule_name = s.name AND a.scheduled_for > now() - interval '1 hour'
      AND a.outcome IN ('failed', 'timeout', 'lease_expired')
) tries
ORDER BY s.name

-- name: process_overview
-- Tickers and workers seen in the last minute, on every host.
SELECT kind, count(*) AS n, count(DISTINCT host) AS hosts, coalesce(sum(running), 0) AS running
FROM fleet.processes WHERE seen_at > now() - interval '60 seconds'
GROUP BY kind
