-- Durable steps of runs (`io.run_task`, `io.wait`, chained `io.send_event`): one row per step key
-- of a run, written as soon as the step succeeds (or fails, or starts waiting), fenced by the
-- run's lease token. A run executing again reads them and returns the stored results instead of
-- running the steps again. Deleted with their run by the pruner.
-- (Number 8 is taken by another change; migrations are applied by number, each once.)
CREATE TABLE run_steps (
    run_id      TEXT NOT NULL,
    key         TEXT NOT NULL,
    kind        TEXT NOT NULL,                 -- task | wait | event
    status      TEXT NOT NULL,                 -- succeeded | failed | waiting
    attempt     INTEGER NOT NULL,              -- the run's attempt that last ran it
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    wait_until  INTEGER,                       -- a wait's due time
    output      TEXT,                          -- JSON
    error       TEXT,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
