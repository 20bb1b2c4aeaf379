-- Statements on `schedule_audit`: who did what to a schedule, when.

-- name: audit_insert
-- The audit rows of one action, in the transaction of the change they record: `at` is its now()
-- and `role` its current_user (the table's defaults; an operator cannot write either).
INSERT INTO fleet.schedule_audit (by_name, action, schedule, note, details)
SELECT %(by)s, %(action)s, v.schedule, %(note)s, v.details
FROM unnest(%(schedules)s::text[], %(details)s::jsonb[]) AS v(schedule, details)

-- name: audit_list
-- The newest audit rows first (of one schedule, or of every one), from `since` on, at most `limit`;
-- an apply's fleet-wide row (no schedule) is listed with every schedule's.
SELECT a.id, a.at, a.role, a.by_name, a.action, a.schedule, a.note, a.details
FROM fleet.schedule_audit a
WHERE (%(schedule)s::text IS NULL OR a.schedule = %(schedule)s OR a.schedule IS NULL)
  AND (%(since)s::timestamptz IS NULL OR a.at >= %(since)s)
ORDER BY a.at DESC, a.id DESC
LIMIT %(limit)s

-- name: audit_expire
-- Retention: at most `limit` audit rows older than their schedule's retention (the fleet's default
-- for a schedule without one, or for a row of none or of a schedule gone), oldest first.
WITH old AS (
    SELECT a.id FROM fleet.schedule_audit a
    LEFT JOIN fleet.schedules s ON s.name = a.schedule
    WHERE a.at < %(start)s::timestamptz - coalesce(s.retention, %(default)s::interval)
    ORDER BY a.at, a.id
    LIMIT %(limit)s
)
DELETE FROM fleet.schedule_audit a USING old WHERE a.id = old.id
