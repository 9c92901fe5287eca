-- A run waiting for the runs it invoked (`io.invoke`, `io.invoke_all`) without a wait row per
-- child: the invoke step holds its child's id (`child_run_id`), and `children_waiting` counts,
-- per calling run, its invoke steps whose child has not ended (nor timed out). A child's end
-- finds its step by `run_steps_child` and takes one off its parent's count; the parent is due
-- when the count is gone. The step's outcome is its child run's, read with the step while the
-- stored step still says `waiting` (`steps::steps_of`): nothing is written to the step when the
-- child ends. Waits stored before this change (and Trigger.dev v2's invoke tasks, which have no
-- such step) keep their `run_waits` rows.
ALTER TABLE run_steps ADD COLUMN child_run_id TEXT;
CREATE INDEX run_steps_child ON run_steps (child_run_id) WHERE child_run_id IS NOT NULL;
CREATE TABLE children_waiting (
    run_id  TEXT PRIMARY KEY,
    n       INTEGER NOT NULL                   -- > 0; the row is deleted at 0
) WITHOUT ROWID;
