-- The overlap gate moves from the schedule's row to a narrow row of its own.
--
-- Under overlap 'skip' or 'queue' every run takes its schedule's gate when claimed and frees it
-- when it ends. On fleet.schedules, each of those two writes copied the whole schedule row (its
-- timing, job, args and cadence windows) and the claim joined on it; a gate row holds only the
-- schedule's name and the slot holding it. Concurrent claimers still serialise on the gate row's
-- lock and re-check it, as they did on the schedule's.
--
-- A gate row is created by the first claim that takes the gate (INSERT ... ON CONFLICT), and goes
-- with its schedule. A schedule without a row has a free gate.
--
-- Not additive: a worker of an earlier version takes the gate on fleet.schedules, which this
-- migration drops, so stop the workers of earlier versions before migrating (their claims would
-- fail on the missing column rather than run two slots of a schedule at once).
CREATE TABLE fleet.schedule_gates (
    name         text PRIMARY KEY REFERENCES fleet.schedules (name) ON DELETE CASCADE,
    running_slot timestamptz
);

INSERT INTO fleet.schedule_gates (name, running_slot)
SELECT name, running_slot FROM fleet.schedules WHERE running_slot IS NOT NULL;

-- The worker's rule for the gate (fleet/roles.sql) moves with it.
DROP POLICY IF EXISTS fleet_worker_gate ON fleet.schedules;
ALTER TABLE fleet.schedules DROP COLUMN running_slot;
