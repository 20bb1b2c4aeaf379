-- Statements on `fleet_processes`: the registry of live tickers and workers.

-- name: process_register
INSERT INTO fleet.processes (id, kind, host, pid, jobs, running, started_at, seen_at)
VALUES (%(id)s, %(kind)s, %(host)s, %(pid)s, %(jobs)s, 0, now(), now())
ON CONFLICT (id) DO UPDATE
SET kind = excluded.kind, host = excluded.host, pid = excluded.pid, jobs = excluded.jobs, running = 0,
    started_at = now(), seen_at = now()

-- name: process_touch
UPDATE fleet.processes SET seen_at = now(), running = %(running)s WHERE id = %(id)s

-- name: process_remove
DELETE FROM fleet.processes WHERE id = %(id)s

-- name: process_live_jobs
-- The live workers (seen within stale_s seconds) and every job at least one of them registered.
WITH live AS (
    SELECT p.jobs FROM fleet.processes p
    WHERE p.kind = 'worker' AND p.seen_at > now() - make_interval(secs => %(stale_s)s)
)
SELECT (SELECT count(*) FROM live) AS workers,
       coalesce((SELECT array_agg(DISTINCT j.job) FROM live CROSS JOIN LATERAL unnest(live.jobs) AS j(job)),
                '{}'::text[]) AS jobs
