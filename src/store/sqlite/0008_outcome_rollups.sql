-- Per-minute counts for the dashboard's rates and the statistics (issue 14): the reads summed
-- every run finished and every event received in their window (0.5-2 s at a million events), and
-- such long reads kept the writer's checkpoints from resetting the WAL. Triggers keep the counts
-- equal to what those scans counted, through every write (completion, rescue, cancel, retry,
-- prune, an endpoint's index), so the reads now sum at most 1,440 rows per job and state.

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

CREATE TRIGGER run_outcomes_insert AFTER INSERT ON runs WHEN new.finished_at IS NOT NULL BEGIN
    INSERT INTO run_outcomes (minute, job_id, status, n)
        VALUES (new.finished_at / 60000, new.job_id, new.status, 1)
        ON CONFLICT (minute, job_id, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_outcomes_update AFTER UPDATE OF status, finished_at, job_id ON runs
WHEN old.finished_at IS NOT new.finished_at OR old.status IS NOT new.status
  OR old.job_id IS NOT new.job_id BEGIN
    UPDATE run_outcomes SET n = n - 1
        WHERE old.finished_at IS NOT NULL AND minute = old.finished_at / 60000
          AND job_id = old.job_id AND status = old.status;
    INSERT INTO run_outcomes (minute, job_id, status, n)
        SELECT new.finished_at / 60000, new.job_id, new.status, 1 WHERE new.finished_at IS NOT NULL
        ON CONFLICT (minute, job_id, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_outcomes_delete AFTER DELETE ON runs WHEN old.finished_at IS NOT NULL BEGIN
    UPDATE run_outcomes SET n = n - 1
        WHERE minute = old.finished_at / 60000 AND job_id = old.job_id AND status = old.status;
END;

CREATE TRIGGER event_counts_insert AFTER INSERT ON events BEGIN
    INSERT INTO event_counts (minute, n) VALUES (new.timestamp / 60000, 1)
        ON CONFLICT (minute) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_counts_delete AFTER DELETE ON events BEGIN
    UPDATE event_counts SET n = n - 1 WHERE minute = old.timestamp / 60000;
END;
