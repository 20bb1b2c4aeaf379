-- Statements on the alert routes, the alert state and the notices to send (`fleetctl alert`).

-- name: alert_route_list
SELECT name, kind, schedules, verdicts, repeat, recovery, target
FROM fleet.alert_routes
ORDER BY name

-- name: alert_route_upsert
INSERT INTO fleet.alert_routes (name, kind, schedules, verdicts, repeat, recovery, target, updated_at)
VALUES (%(name)s, %(kind)s, %(schedules)s::text[], %(verdicts)s::text[], %(repeat)s, %(recovery)s,
        %(target)s, now())
ON CONFLICT (name) DO UPDATE
SET kind = EXCLUDED.kind, schedules = EXCLUDED.schedules, verdicts = EXCLUDED.verdicts,
    repeat = EXCLUDED.repeat, recovery = EXCLUDED.recovery, target = EXCLUDED.target,
    updated_at = now()

-- name: alert_route_delete
-- Their state and unsent notices go with them (ON DELETE CASCADE).
DELETE FROM fleet.alert_routes WHERE name = ANY(%(names)s::text[])

-- name: alert_state_list
SELECT route, subject, verdict, opened_at, last_sent_at, notices
FROM fleet.alert_state

-- name: alert_state_open
-- A problem told now: a new one, or a consequence of a fleet verdict held until now.
INSERT INTO fleet.alert_state (route, subject, verdict, opened_at, last_sent_at, notices)
VALUES (%(route)s, %(subject)s, %(verdict)s, %(now)s, %(now)s, 1)
ON CONFLICT (route, subject, verdict) DO UPDATE
SET opened_at = EXCLUDED.opened_at, last_sent_at = EXCLUDED.last_sent_at, notices = 1

-- name: alert_state_hold
-- A consequence of a fleet verdict (NO-TICKER: no slot, so LATE), read while that verdict holds:
-- kept untold (`notices` 0), `last_sent_at` the last read that found it the fleet's. One told
-- before the fleet verdict held stays as it is.
INSERT INTO fleet.alert_state (route, subject, verdict, opened_at, last_sent_at, notices)
VALUES (%(route)s, %(subject)s, %(verdict)s, %(now)s, %(now)s, 0)
ON CONFLICT (route, subject, verdict) DO UPDATE
SET last_sent_at = EXCLUDED.last_sent_at
WHERE fleet.alert_state.notices = 0

-- name: alert_state_touch
UPDATE fleet.alert_state SET last_sent_at = %(now)s, notices = notices + 1
WHERE route = %(route)s AND subject = %(subject)s AND verdict = %(verdict)s

-- name: alert_state_close
DELETE FROM fleet.alert_state WHERE route = %(route)s AND subject = %(subject)s AND verdict = %(verdict)s

-- name: notice_add
INSERT INTO fleet.alert_outbox (route, subject, verdict, event, payload, created_at, next_at)
VALUES (%(route)s, %(subject)s, %(verdict)s, %(event)s, %(payload)s, %(now)s, %(now)s)

-- name: notice_claim
-- Up to `limit` notices due to be sent, each the oldest unsent one of its route and subject (a
-- route tells of one schedule in order: its alert before its recovery), taken for `lease_s`. A
-- notice whose claim ran out (its alert process died while sending) is due again. Another alert
-- process skips the rows locked here, and finds them `sending` once this commits.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
c AS (
    SELECT o.id FROM fleet.alert_outbox o, t
    WHERE o.status IN ('pending', 'sending')
      AND CASE WHEN o.status = 'pending' THEN o.next_at <= t.now ELSE o.locked_until < t.now END
      AND NOT EXISTS (
          SELECT 1 FROM fleet.alert_outbox p
          WHERE p.route = o.route AND p.subject = o.subject AND p.id < o.id
            AND p.status IN ('pending', 'sending'))
    ORDER BY o.id
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE fleet.alert_outbox o
SET status = 'sending', attempts = o.attempts + 1, locked_by = %(by)s,
    locked_until = t.now + make_interval(secs => %(lease_s)s)
FROM c, t
WHERE o.id = c.id
RETURNING o.id, o.route, o.subject, o.verdict, o.event, o.payload, o.attempts, o.created_at

-- name: notice_sent
-- Fenced on the claim's attempt: a claim that ran out and was taken again changes nothing here.
UPDATE fleet.alert_outbox
SET status = 'sent', sent_at = coalesce(%(now)s::timestamptz, now()), locked_by = NULL, locked_until = NULL,
    last_error = NULL
WHERE id = %(id)s AND attempts = %(attempts)s AND status = 'sending'

-- name: notice_failed
-- Tried again `retry_in_s` later; failed for good once the notice is older than `give_up_s`.
UPDATE fleet.alert_outbox
SET status = CASE WHEN created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(give_up_s)s)
                  THEN 'failed' ELSE 'pending' END,
    next_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(retry_in_s)s),
    locked_by = NULL, locked_until = NULL, last_error = %(error)s
WHERE id = %(id)s AND attempts = %(attempts)s AND status = 'sending'
RETURNING status

-- name: notice_next_wait
-- Seconds until the next notice is due (0 or less: now); NULL when none waits.
SELECT extract(epoch FROM min(CASE WHEN status = 'pending' THEN next_at ELSE locked_until END)
                          - coalesce(%(now)s::timestamptz, now()))::float8 AS wait_s
FROM fleet.alert_outbox WHERE status IN ('pending', 'sending')

-- name: notice_prune
-- Sent and failed notices older than `keep_s`, a batch at a time.
DELETE FROM fleet.alert_outbox
WHERE id IN (SELECT id FROM fleet.alert_outbox
             WHERE created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
               AND status IN ('sent', 'failed')
             ORDER BY created_at LIMIT 1000)
