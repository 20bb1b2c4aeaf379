-- Housekeeping that the tickers share (retention, the health roll-up): one row per chore, done by
-- one ticker at a time. A ticker takes a due chore's row with FOR UPDATE SKIP LOCKED, does one small
-- step in the same transaction and sets when the chore is due next; `mark` and `cursor` carry its
-- progress from one step to the next, whichever ticker takes the following step. Rows are added by
-- the tickers (a new chore needs no migration).
CREATE TABLE IF NOT EXISTS fleet.chores (
    name text PRIMARY KEY,
    due_at timestamptz NOT NULL DEFAULT now(),
    mark timestamptz,
    cursor text,
    steps bigint NOT NULL DEFAULT 0,
    stepped_at timestamptz
);

-- How long a schedule's finished runs are kept; NULL: the fleet's default (the ticker's --retention).
ALTER TABLE fleet.schedules
    ADD COLUMN IF NOT EXISTS retention interval CHECK (retention > interval '0');
