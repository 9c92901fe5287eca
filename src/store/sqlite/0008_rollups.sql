-- Per-minute counts for the dashboard's rates and the statistics (issue 14): those reads summed
-- every run finished and every event received in their window (0.5-2 s at a million events), and
-- such long reads held old snapshots that kept the writer's checkpoints from resetting the WAL.
-- The writer keeps these counts (`rollups.rs`): each operation notes what it finished, received,
-- re-opened or deleted, and the batch adds it up once, just before its commit, so the counts
-- always equal what a scan would count. The reads sum at most 1,440 minutes per job and state.

CREATE TABLE run_outcomes (
    minute  INTEGER NOT NULL,                  -- finished_at / 60000
    job_id  TEXT NOT NULL,
    status  TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (minute, job_id, status)
) WITHOUT ROWID;
INSERT INTO run_outcomes (minute, job_id, status, n)
    SELECT finished_at / 60000, job_id, status, count(*) FROM runs
    WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3;

CREATE TABLE event_counts (
    minute  INTEGER PRIMARY KEY,               -- timestamp / 60000
    n       INTEGER NOT NULL
);
INSERT INTO event_counts (minute, n)
    SELECT timestamp / 60000, count(*) FROM events GROUP BY 1;

-- Only the scans these counts replace read it; every completion paid for its entry.
DROP INDEX IF EXISTS runs_finished;
