-- A claim writes the queue alone. Before, a claim also updated the run row (status, attempt,
-- start time, lease token, node), so every run was written twice by its workers, once to start
-- and once to finish. Writing it once, a 200,000-run benchmark wrote 22 % less WAL (484 MB, was 624 MB;
-- BENCHMARKS.md, PostgreSQL, issue 5). Now an attempt in progress lives on the run's
-- queue row: its lease and fencing token, its attempt number (counted here, so a rescue or a
-- restart never loses it), when and on which node it started. The run row is written once, when
-- the attempt ends (completion, rescue, release or cancel), from the queue row it then leaves.
--
-- A running run's row in `runs` keeps the status `queued`: readers take the state from the view
-- `run_state`, which overlays the queue's lease on the history (running while a lease is held).

ALTER TABLE run_queue
    ADD COLUMN lease_token bigint,                 -- fences the holder's writes; NULL while queued
    ADD COLUMN attempt     integer NOT NULL DEFAULT 0, -- attempts started, this one included
    ADD COLUMN started_at  bigint,                 -- of the attempt in progress
    ADD COLUMN node        text;                   -- that claimed it

-- Runs running at the upgrade keep their lease: the worker holding it completes them as before.
UPDATE run_queue q SET attempt = r.attempt,
       lease_token = CASE WHEN r.status = 'running' THEN r.lease_token END,
       started_at = CASE WHEN r.status = 'running' THEN r.started_at END,
       node = CASE WHEN r.status = 'running' THEN r.node END
    FROM runs r WHERE r.seq = q.seq;
UPDATE runs SET status = 'queued' WHERE status = 'running';

ALTER TABLE runs DROP COLUMN lease_until, DROP COLUMN lease_token;

-- Each run as readers see it: `status`, `attempt`, `started_at` and `node` of the attempt in
-- progress while it holds a lease, else as recorded. `stored_status` is the column of `runs`
-- (for conditions an index can serve).
CREATE VIEW run_state AS
SELECT r.seq, r.id, r.event_id, r.job_id, r.job_version,
       CASE WHEN q.lease_until IS NULL THEN r.status ELSE 'running' END AS status,
       coalesce(q.attempt, r.attempt) AS attempt,
       r.max_attempts, r.run_at,
       CASE WHEN q.lease_until IS NULL THEN r.started_at ELSE q.started_at END AS started_at,
       r.finished_at, r.output, r.error, r.created_at,
       CASE WHEN q.lease_until IS NULL THEN r.node ELSE q.node END AS node,
       r.unsuccessful, r.status AS stored_status
FROM runs r LEFT JOIN run_queue q ON q.seq = r.seq;
