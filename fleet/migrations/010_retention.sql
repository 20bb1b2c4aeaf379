-- Built-in retention: the tickers delete finished runs, and their attempts go with them through
-- this trigger. It runs as the schema's owner, so a ticker's role needs no right on job_attempts
-- (it can remove attempts only by removing a finished run); the function names every object it
-- touches with its schema.
ALTER FUNCTION fleet.delete_attempts() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
