-- Statements on `chores`: the housekeeping steps the tickers share.

-- name: chore_add
INSERT INTO fleet.chores (name, due_at)
SELECT unnest(%(names)s::text[]), coalesce(%(now)s::timestamptz, now())
ON CONFLICT DO NOTHING

-- name: chore_take
-- A due chore, locked for this transaction; none when it is not due or another ticker holds it.
SELECT c.name, c.mark, c.cursor, c.steps, t.now AS db_now
FROM fleet.chores c, (SELECT coalesce(%(now)s::timestamptz, now()) AS now) t
WHERE c.name = %(name)s AND c.due_at <= t.now
FOR UPDATE OF c SKIP LOCKED

-- name: chore_done
UPDATE fleet.chores
SET due_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(due_in_s)s),
    mark = %(mark)s, cursor = %(cursor)s, steps = steps + 1,
    stepped_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s

-- name: chore_postpone
-- After a failed step: due again later, its progress as it was.
UPDATE fleet.chores
SET due_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(due_in_s)s)
WHERE name = %(name)s

-- name: chore_next_wait
-- Seconds from now() to the earliest due chore among `names`.
SELECT extract(epoch FROM min(due_at) - coalesce(%(now)s::timestamptz, now()))::float8 AS wait_s
FROM fleet.chores WHERE name = ANY(%(names)s::text[])
