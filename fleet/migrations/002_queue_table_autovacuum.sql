-- job_runs is a queue table: rows change state several times, and its hot statements depend on
-- fresh statistics about how many rows are pending or running. With the default scale factors a
-- table of millions of finished rows is analysed only after hundreds of thousands of changes, long
-- after a backlog has appeared; analyse and vacuum after a fixed number of changes instead.
ALTER TABLE job_runs SET (
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 5000
);
ALTER TABLE schedules SET (autovacuum_vacuum_scale_factor = 0.05);
