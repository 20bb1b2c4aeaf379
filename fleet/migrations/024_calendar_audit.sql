-- A schedule's calendar: dates whose slots do not run and an end bound (`exclude`, `until` in the
-- schedules file), as apply wrote them: {"exclude": ["2026-12-25", "2026-12-24..2026-12-26"],
-- "until": "2027-06-30"}. Null for a schedule without one. A ticker of an earlier version does not
-- read it (it would run the excluded slots): upgrade the tickers before applying calendars.
ALTER TABLE fleet.schedules ADD COLUMN calendar jsonb;
ALTER TABLE fleet.schedules ADD CONSTRAINT schedules_calendar_size
    CHECK (calendar IS NULL OR octet_length(calendar::text) <= 65536) NOT VALID;

-- Who did what: a row per operator action on a schedule (pause, resume, trigger, retry, discard,
-- backfill, apply). `at` and `role` are the database's own (its now() and current_user): an operator
-- is granted the other columns only, so neither can be written otherwise. `by_name` is who the
-- operator says they are (`--by`), `schedule` null for an apply too large to list per schedule.
CREATE TABLE fleet.schedule_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    role text NOT NULL DEFAULT current_user,
    by_name text CHECK (by_name IS NULL OR char_length(by_name) BETWEEN 1 AND 100),
    action text NOT NULL
        CHECK (action IN ('pause', 'resume', 'trigger', 'retry', 'discard', 'backfill', 'apply')),
    schedule text CHECK (char_length(schedule) <= 200),
    note text CHECK (note IS NULL OR char_length(note) <= 500),
    details jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (octet_length(details::text) <= 16384)
);
-- A schedule's latest rows (its page, `fleetctl audit --schedule`), and the oldest ones (retention).
CREATE INDEX schedule_audit_schedule ON fleet.schedule_audit (schedule, at DESC, id DESC);
CREATE INDEX schedule_audit_at ON fleet.schedule_audit (at, id);
