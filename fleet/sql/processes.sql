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

-- name: process_crash
-- A process's unexpected error, counted on its row: the count and the error stay when it registers
-- again under the same id (a restart), and go with the row on a clean stop. The process was alive
-- to say it, so the row counts as seen; a row gone meanwhile is made again.
INSERT INTO fleet.processes (id, kind, host, pid, crashes, crashed_at, last_error)
VALUES (%(id)s, %(kind)s, %(host)s, %(pid)s, 1, now(), left(%(error)s, 4000))
ON CONFLICT (id) DO UPDATE
SET crashes = fleet.processes.crashes + 1, crashed_at = now(), last_error = excluded.last_error, seen_at = now()
