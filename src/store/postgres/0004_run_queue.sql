-- The queue leaves the run history. Before, every claim and completion changed `status` (and
-- `finished_at`), which several indexes of `runs` covered: each of the two updates of a run wrote
-- a new entry into every index of the table. Now the indexes of `runs` cover only columns that
-- never change (or change only when a run fails), so a claim or a completion is a HOT update
-- (no index touched) when its page has room (fillfactor 50), and the state a worker needs lives
-- in two small tables:
--
-- * `run_queue`: one row per queued or running run (a running one holds a lease). The claim walks
--   its partial index of runnable rows; a completion deletes the row.
-- * `run_outcomes`: finished runs counted per minute, job and status, for the success and failure
--   rates (was a scan of `runs_finished`; a completion now adds to one row per batch).
--
-- Measured in BENCHMARKS.md (PostgreSQL, issue 5).

CREATE TABLE run_queue (
    seq         bigint PRIMARY KEY,            -- runs.seq
    job_id      text NOT NULL,
    run_at      bigint NOT NULL,
    lease_until bigint                         -- NULL while queued; set while a worker holds it
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
INSERT INTO run_queue (seq, job_id, run_at, lease_until)
    SELECT seq, job_id, run_at, CASE WHEN status = 'running' THEN coalesce(lease_until, 0) END
    FROM runs WHERE status IN ('queued', 'running');
-- Runnable runs in due order (the claim, `next_due`); leased ones by expiry (the rescuer).
CREATE INDEX run_queue_due ON run_queue (run_at, seq) WHERE lease_until IS NULL;
CREATE INDEX run_queue_leased ON run_queue (lease_until) WHERE lease_until IS NOT NULL;

CREATE TABLE run_outcomes (
    minute  bigint NOT NULL,                   -- finished_at / 60000
    job_id  text NOT NULL,
    status  text NOT NULL,                     -- succeeded | failed | cancelled
    n       bigint NOT NULL,
    PRIMARY KEY (minute, job_id, status)
);
INSERT INTO run_outcomes (minute, job_id, status, n)
    SELECT finished_at / 60000, job_id, status, count(*) FROM runs
    WHERE finished_at IS NOT NULL AND status IN ('succeeded', 'failed', 'cancelled')
    GROUP BY 1, 2, 3;

-- Failed and cancelled runs, for the run list's filters: a column that stays NULL through a
-- claim and a success, so indexing it does not stop those updates from being HOT.
ALTER TABLE runs ADD COLUMN unsuccessful text
    GENERATED ALWAYS AS (CASE WHEN status IN ('failed', 'cancelled') THEN status END) STORED;

DROP INDEX runs_runnable;
DROP INDEX runs_leased;
DROP INDEX runs_event_status;
DROP INDEX runs_finished;
DROP INDEX runs_failed;
DROP INDEX runs_job_failed;
CREATE INDEX runs_event ON runs (event_id);
CREATE INDEX runs_unsuccessful ON runs (unsuccessful, seq) WHERE unsuccessful IS NOT NULL;
CREATE INDEX runs_job_unsuccessful ON runs (job_id, unsuccessful, seq) WHERE unsuccessful IS NOT NULL;
ALTER TABLE runs SET (fillfactor = 50);
