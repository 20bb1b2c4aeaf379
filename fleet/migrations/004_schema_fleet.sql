-- Everything of fleet in its own schema, `fleet`, never in `public`: fleet shares databases with
-- applications that have tables of their own (a `public.schedules` of theirs is never touched).
-- A new database got migrations 1-3 in `fleet` already (they run with search_path = fleet); a
-- database migrated before this version has them in `public` and they move here, rows intact.
DO $$
BEGIN
    IF to_regclass('fleet.job_runs') IS NULL AND to_regclass('public.job_runs') IS NOT NULL THEN
        ALTER TABLE public.schedules SET SCHEMA fleet;
        ALTER TABLE public.job_runs SET SCHEMA fleet;
        ALTER TABLE public.job_attempts SET SCHEMA fleet;
        ALTER TABLE public.fleet_processes SET SCHEMA fleet;
        ALTER TYPE public.fleet_run_status SET SCHEMA fleet;
        ALTER FUNCTION public.fleet_delete_attempts() SET SCHEMA fleet;
    END IF;
END
$$;

-- Inside the schema the prefix says nothing: fleet.processes, fleet.run_status.
ALTER TABLE fleet.fleet_processes RENAME TO processes;
ALTER TYPE fleet.fleet_run_status RENAME TO run_status;

-- The trigger function names its table by schema, so that it works whatever the caller's
-- search_path is.
DROP TRIGGER job_runs_delete_attempts ON fleet.job_runs;
DROP FUNCTION fleet.fleet_delete_attempts();

CREATE FUNCTION fleet.delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM fleet.job_attempts a
    USING gone g
    WHERE a.schedule_name = g.schedule_name AND a.scheduled_for = g.scheduled_for;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_runs_delete_attempts
    AFTER DELETE ON fleet.job_runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION fleet.delete_attempts();
