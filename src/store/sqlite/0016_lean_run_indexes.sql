-- Fewer index entries per run (issue 16). A run's state changes twice (queued → running →
-- finished), and every index that holds `status` was rewritten at each change: a run cost 24
-- B-tree writes over its life. The indexes below hold only what changes rarely or what the
-- hot path must find, so a run now costs 10: its row and four entries when it is created (id,
-- event, job, queue), three when claimed (row, out of the queue, into the leases), two when it
-- finishes (row, out of the leases). Lists of successful runs walk the table or `runs_job`
-- newest first and skip the rest (most runs succeed); failed and cancelled runs, the ones
-- people look for, keep indexes of their own; queued and running runs are read off the queue
-- and lease indexes, whose size is the queue's, not the history's.

DROP INDEX IF EXISTS runs_event_status;
DROP INDEX IF EXISTS runs_status;
DROP INDEX IF EXISTS runs_job_status;
CREATE INDEX runs_event ON runs (event_id);
-- Written once, when a run fails or is cancelled. The condition is an OR, not an IN, so that the
-- planner sees `status = 'failed'` in a query as implying it.
CREATE INDEX runs_unsuccessful ON runs (status, seq)
    WHERE status = 'failed' OR status = 'cancelled';
CREATE INDEX runs_job_unsuccessful ON runs (job_id, status, seq)
    WHERE status = 'failed' OR status = 'cancelled';
-- The queue and lease indexes carry the job, so the claim filters its jobs and the jobs page
-- counts queued and running runs per job without reading a row.
DROP INDEX IF EXISTS runs_runnable;
CREATE INDEX runs_runnable ON runs (run_at, seq, job_id) WHERE status = 'queued';
DROP INDEX IF EXISTS runs_leased;
CREATE INDEX runs_leased ON runs (lease_until, job_id) WHERE status = 'running';
