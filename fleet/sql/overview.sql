-- Read-only statements of `fleetctl up`: its start-up checks and its live view (whose verdicts
-- come from `fleetctl status`). It reads the schedules' health and the runs of the last hour, through indexes.

-- name: schedule_count
SELECT count(*) AS n FROM fleet.schedules

-- name: schedule_jobs
-- The jobs enabled schedules run, each with the schedules that name it.
SELECT job, array_agg(name ORDER BY name) AS schedules
FROM fleet.schedules WHERE enabled GROUP BY job ORDER BY job

-- name: clock_now
-- The database's now, which the view measures "ago" and "in" against.
SELECT now() AS now

-- name: run_recent_counts
-- Per schedule, the runs that finished in the last hour (through job_runs_finished) by status, and
-- the attempts that failed, timed out or lost their lease in the last hour among those runs and
-- the open ones (through job_attempts' primary key): what happened lately, in runs of the last hour,
-- not in the schedule's whole history. Each schedule's verdict and numbers come from `status`.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) - interval '1 hour' AS since),
recent AS (
    SELECT r.schedule_name, r.scheduled_for, r.status FROM fleet.job_runs r, t
    WHERE r.status IN ('done', 'dead', 'skipped') AND r.finished_at > t.since
    UNION ALL
    SELECT r.schedule_name, r.scheduled_for, r.status FROM fleet.job_runs r
    WHERE r.status IN ('pending', 'running')
)
SELECT x.schedule_name,
       count(*) FILTER (WHERE x.status = 'done') AS done,
       count(*) FILTER (WHERE x.status = 'skipped') AS skipped,
       coalesce(sum(a.n), 0)::bigint AS retried
FROM recent x
CROSS JOIN t
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM fleet.job_attempts a
    WHERE a.schedule_name = x.schedule_name AND a.scheduled_for = x.scheduled_for
      AND a.finished_at > t.since AND a.outcome IN ('failed', 'timeout', 'lease_expired')
) a
GROUP BY x.schedule_name

-- name: process_overview
-- Tickers and workers seen in the last minute, on every host.
SELECT kind, count(*) AS n, count(DISTINCT host) AS hosts, coalesce(sum(running), 0) AS running
FROM fleet.processes WHERE seen_at > now() - interval '60 seconds'
GROUP BY kind
