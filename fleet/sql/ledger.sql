-- Statements of the slot ledger (fleet.health.verify): a window's schedules and their runs, read in one
-- snapshot.

-- name: ledger_begin
-- The ledger's transaction: one snapshot for every schedule and run it reads, and nothing written.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: ledger_session
-- For the rest of the transaction: no JIT compilation (it costs more than a ledger's statements
-- take), instants in UTC. The instant of the read.
SELECT set_config('jit', 'off', true), set_config('TimeZone', 'UTC', true),
       coalesce(%(now)s::timestamptz, now()) AS now

-- name: schedule_ledger
-- The schedules to verify (those named, else every enabled one), by name, with what explains a
-- slot without a run: when the schedule was created, its pause, its broken mark, the ticker's next
-- slot, its catch-up counter and its retention; and its pauses and resumes as the audit recorded
-- them (fleet.admin.repair), in order, from the last pause begun (or resume) before the window on
-- (a pause row's outcome is `paused` when it began a pause, `note` when it gave one a note), read
-- through the audit's index by schedule and time: nothing for a schedule never paused.
SELECT s.name, s.every, s.cron, s.timezone, s.start_at, s.dst_repeated, s.dst_missing,
       s.enabled, s.paused_at, s.pause_note, s.broken_at, s.broken_error, s.next_run_at,
       s.missed_slots, s.catchup, s.grace, s.retention, s.created_at, s.calendar,
       p.pause_at, p.pause_action, p.pause_outcome, p.pause_note AS pause_notes
FROM fleet.schedules s
CROSS JOIN LATERAL (
    SELECT array_agg(a.at ORDER BY a.at, a.id) AS pause_at,
           array_agg(a.action ORDER BY a.at, a.id) AS pause_action,
           array_agg(a.details->>'outcome' ORDER BY a.at, a.id) AS pause_outcome,
           array_agg(a.note ORDER BY a.at, a.id) AS pause_note
    FROM fleet.schedule_audit a
    WHERE a.schedule = s.name AND a.action IN ('pause', 'resume')
      AND a.at >= coalesce((SELECT b.at FROM fleet.schedule_audit b
                            WHERE b.schedule = s.name AND b.at < %(since)s
                              AND (b.action = 'resume' OR (b.action = 'pause' AND b.details->>'outcome' = 'paused'))
                            ORDER BY b.at DESC, b.id DESC LIMIT 1), %(since)s)
) p
WHERE (%(every)s AND s.enabled) OR s.name = ANY(%(names)s::text[])
ORDER BY s.name

-- name: run_ledger
-- A schedule's runs in [from, until], in slot order, packed: one row per span of `step_us`
-- microseconds from `from`, holding its runs as 16-byte records (the slot as timestamptz_send
-- gives it, microseconds since 2000-01-01 UTC, then its int8 code, fleet.ledger_code: a slot the
-- schedule's calendar excludes is among its "anything else", and fleet.health.ledger tells it by the
-- calendar). A row per run would cost the driver a step per run; a span's records are unpacked at
-- once. Each span is a range of the primary key; the attempts are looked up only for a run done
-- after more than one.
SELECT (
    SELECT string_agg(
               timestamptz_send(r.scheduled_for)
               || int8send(fleet.ledger_code(r.status, r.attempts, r.last_outcome, r.last_error, r.origin,
                                             EXISTS (SELECT 1 FROM fleet.job_attempts a
                                                     WHERE a.schedule_name = r.schedule_name
                                                       AND a.scheduled_for = r.scheduled_for
                                                       AND a.outcome = 'lease_expired'))),
               ''::bytea ORDER BY r.scheduled_for)
    FROM fleet.job_runs r
    WHERE r.schedule_name = %(name)s
      AND r.scheduled_for >= b.lo AND r.scheduled_for < b.lo + %(step_us)s * interval '1 microsecond'
      AND r.scheduled_for <= %(until)s
) AS runs
FROM generate_series(%(from)s::timestamptz, %(until)s::timestamptz, %(step_us)s * interval '1 microsecond')
     AS b(lo)

-- name: outcome_ledger
-- The compact outcomes of a schedule's removed runs (fleet.slot_outcomes) whose batches reach into
-- [from, until], oldest first: each a bytea of run_ledger's 16-byte records.
SELECT o.records
FROM fleet.slot_outcomes o
WHERE o.schedule_name = %(name)s AND o.last_slot >= %(from)s AND o.first_slot <= %(until)s
ORDER BY o.first_slot, o.id
