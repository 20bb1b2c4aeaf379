-- The health roll-up, at a cost in the runs that finished, not in the schedules.
--
-- Every step of the roll-up looks for the schedules an operator's retry or discard marked dirty;
-- without an index it walked every schedule to find none. Only dirty rows are in this index, and a
-- step clears them.
CREATE INDEX IF NOT EXISTS schedule_stats_dirty ON fleet.schedule_stats (name) WHERE dirty > 0;

-- A schedule's stats row is rewritten each time one of its runs finishes. With room left on its
-- page the new version stays there (a heap-only update) and the primary key is not written again;
-- full pages made every such update insert an index entry. Applies to pages written from now on
-- (a VACUUM FULL or the rows' own turnover moves the others).
ALTER TABLE fleet.schedule_stats SET (fillfactor = 50);
