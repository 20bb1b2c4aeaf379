-- The slot ledger outlives retention: when runs are removed (the tickers' retention, `fleetctl
-- prune`), each slot's outcome stays behind in compact form, so `fleetctl verify` still accounts
-- for every slot of a window older than the runs kept. A row holds one batch of a schedule's
-- removed runs as run_ledger packs them: 16-byte records (the slot as timestamptz_send gives it,
-- then the outcome's code, fleet.ledger_code). The tickers remove rows whose last slot is older
-- than the ledger's own retention (FLEET_LEDGER_RETENTION).
CREATE TABLE fleet.slot_outcomes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_name text NOT NULL,
    first_slot  timestamptz NOT NULL,
    last_slot   timestamptz NOT NULL,
    slots       integer NOT NULL CHECK (slots > 0),
    records     bytea NOT NULL CHECK (octet_length(records) = 16 * slots),
    removed_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (first_slot <= last_slot)
);
CREATE INDEX slot_outcomes_schedule ON fleet.slot_outcomes (schedule_name, last_slot);
CREATE INDEX slot_outcomes_age ON fleet.slot_outcomes (last_slot);

-- A run's outcome as one code of the ledger: attempts * 256 + kind, plus 16 for a run an operator
-- made (trigger, backfill). Kinds: 1 done, 2 done after a lease ran out (`lease_expired`: whether
-- an attempt of the run ended so), 3 dead, 4 pending, 5 running, skipped by 6 the catch-up, 7
-- max_lateness, 8 overlap, 9 an operator's discard, 10 anything else. One SQL expression, which the
-- planner inlines into the statements that call it, so `lease_expired` is looked up only for a run
-- done after more than one attempt.
CREATE FUNCTION fleet.ledger_code(
    status fleet.run_status, attempts integer, last_outcome text, last_error text, origin text,
    lease_expired boolean
) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT least(attempts, 16777215)::bigint * 256
       + CASE WHEN status = 'done' THEN CASE WHEN attempts > 1 AND lease_expired THEN 2 ELSE 1 END
              WHEN status = 'dead' THEN 3
              WHEN status = 'pending' THEN 4
              WHEN status = 'running' THEN 5
              WHEN last_outcome = 'discarded' THEN 9
              WHEN last_error LIKE 'catchup %' THEN 6
              WHEN last_error LIKE 'max_lateness:%' THEN 7
              WHEN last_error LIKE 'overlap:%' THEN 8
              ELSE 10 END
       + CASE WHEN origin = 'schedule' THEN 0 ELSE 16 END
$$;

-- When runs are deleted, their attempts go with them, and each finished run (done, skipped, dead)
-- leaves its outcome in the slot ledger, derived here from the row itself: no role writes the
-- ledger directly, so none can forge an outcome. A transaction that sets `fleet.keep_outcomes` to
-- `off` (`fleetctl prune --no-ledger`, a ticker with FLEET_LEDGER_RETENTION=off) keeps none. The
-- outcomes are written before the attempts go: an attempt tells a run done after a lease ran out.
CREATE FUNCTION fleet.runs_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(current_setting('fleet.keep_outcomes', true), '') <> 'off' THEN
        INSERT INTO fleet.slot_outcomes (schedule_name, first_slot, last_slot, slots, records)
        SELECT g.schedule_name, min(g.scheduled_for), max(g.scheduled_for), count(*),
               string_agg(timestamptz_send(g.scheduled_for)
                          || int8send(fleet.ledger_code(g.status, g.attempts, g.last_outcome, g.last_error,
                                                        g.origin,
                                                        EXISTS (SELECT 1 FROM fleet.job_attempts a
                                                                WHERE a.schedule_name = g.schedule_name
                                                                  AND a.scheduled_for = g.scheduled_for
                                                                  AND a.outcome = 'lease_expired'))),
                          ''::bytea ORDER BY g.scheduled_for)
        FROM gone g
        WHERE g.status IN ('done', 'skipped', 'dead')
        GROUP BY g.schedule_name;
    END IF;
    DELETE FROM fleet.job_attempts a
    USING gone g
    WHERE a.schedule_name = g.schedule_name AND a.scheduled_for = g.scheduled_for;
    RETURN NULL;
END
$$;
DROP TRIGGER job_runs_delete_attempts ON fleet.job_runs;
DROP FUNCTION fleet.delete_attempts();
CREATE TRIGGER job_runs_deleted
    AFTER DELETE ON fleet.job_runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION fleet.runs_deleted();
