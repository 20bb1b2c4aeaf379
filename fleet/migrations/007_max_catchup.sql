-- How many missed slots `catchup = "all"` may still run (or record as skipped) after an outage: the
-- newest ones; older slots are counted missed, not created. However the slots came to be missed (a
-- long outage, a `start_at` typo far in the past), a schedule cannot flood the table.
ALTER TABLE fleet.schedules
    ADD COLUMN IF NOT EXISTS max_catchup integer NOT NULL DEFAULT 1000
        CHECK (max_catchup BETWEEN 1 AND 100000);
