-- A ticker that meets an unexpected error records it on its registry row, and goes on (or, when the
-- error ends it, leaves the row behind): `status`, metrics and the dashboard show a fleet whose
-- tickers crash as TICKER-CRASHING. The count survives a restart under the same id (a process
-- manager restarts a program under the same name); a clean stop removes the row.
ALTER TABLE fleet.processes
    ADD COLUMN IF NOT EXISTS crashes integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS crashed_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_error text;
