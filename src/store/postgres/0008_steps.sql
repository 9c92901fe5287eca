-- Durable steps of runs (`io.run_task`, `io.wait`, chained `io.send_event`): one row per step key
-- of a run, written as soon as the step succeeds (or fails, or starts waiting), fenced by the
-- lease token on the run's queue row. A run executing again reads them and returns the stored
-- results instead of running the steps again. Deleted with their run by the pruner.
CREATE TABLE run_steps (
    run_id      text NOT NULL,
    key         text NOT NULL,
    kind        text NOT NULL,                 -- task | wait | event
    status      text NOT NULL,                 -- succeeded | failed | waiting
    attempt     integer NOT NULL,              -- the run's attempt that last ran it
    started_at  bigint NOT NULL,
    finished_at bigint,
    wait_until  bigint,                        -- a wait's due time
    output      text,                          -- JSON
    error       text,
    PRIMARY KEY (run_id, key)
);
