-- Cluster-wide concurrency limits (issue 26). A run of a job with limits takes one or two
-- *slots* (`model::flow`): `slot_a`, the job's own (`key:<job>:<value>` or `job:<job>`), which
-- is also the queue it waits in, and `slot_b`, a second limit (`job:<job>` or `group:<name>`).
-- `flow_slots` counts the runs executing in each slot; the triggers below keep the counts with
-- every change of a run's state, whoever makes it (claim, completion, wait, release, rescue,
-- cancel), so a run whose worker died holds its slots until the rescuer takes it back.
--
-- The claim reads `flow_slots_free`: slots with room and a due run (`next_due`, a lower bound
-- of the due times of their queued runs, made exact by the claim that finds it stale). A slot
-- at its limit is not in that index, so a key holding a backlog costs a claim nothing, and runs
-- with slots are not in `runs_runnable` either (the plain claim walks only runs without).

ALTER TABLE jobs ADD COLUMN concurrency_limits TEXT;     -- JSON list of limits; NULL: none
ALTER TABLE runs ADD COLUMN slot_a TEXT;
ALTER TABLE runs ADD COLUMN slot_b TEXT;

CREATE TABLE flow_slots (
    slot     TEXT PRIMARY KEY,
    job_id   TEXT,                 -- the job whose queue it is; NULL for a group
    cap      INTEGER NOT NULL,     -- from the latest definition
    running  INTEGER NOT NULL DEFAULT 0,
    next_due INTEGER               -- NULL: no queued run
) WITHOUT ROWID;
CREATE INDEX flow_slots_free ON flow_slots (job_id, next_due)
    WHERE next_due IS NOT NULL AND running < cap;

DROP INDEX IF EXISTS runs_runnable;
-- slot_a (always NULL here) is a column too, so that reads of the queue stay index-only.
CREATE INDEX runs_runnable ON runs (run_at, seq, job_id, slot_a) WHERE status = 'queued' AND slot_a IS NULL;
CREATE INDEX runs_slot_queue ON runs (slot_a, run_at, seq, job_id)
    WHERE status = 'queued' AND slot_a IS NOT NULL;

CREATE TRIGGER runs_flow_take AFTER UPDATE OF status ON runs
    WHEN NEW.slot_a IS NOT NULL AND NEW.status = 'running' AND OLD.status <> 'running'
BEGIN
    UPDATE flow_slots SET running = running + 1 WHERE slot IN (NEW.slot_a, NEW.slot_b);
END;
CREATE TRIGGER runs_flow_free AFTER UPDATE OF status ON runs
    WHEN NEW.slot_a IS NOT NULL AND OLD.status = 'running' AND NEW.status <> 'running'
BEGIN
    UPDATE flow_slots SET running = running - 1 WHERE slot IN (NEW.slot_a, NEW.slot_b);
END;
CREATE TRIGGER runs_flow_due AFTER UPDATE OF status, run_at ON runs
    WHEN NEW.slot_a IS NOT NULL AND NEW.status = 'queued'
BEGIN
    UPDATE flow_slots SET next_due = min(coalesce(next_due, NEW.run_at), NEW.run_at)
        WHERE slot = NEW.slot_a;
END;
CREATE TRIGGER runs_flow_gone AFTER DELETE ON runs
    WHEN OLD.slot_a IS NOT NULL AND OLD.status = 'running'
BEGIN
    UPDATE flow_slots SET running = running - 1 WHERE slot IN (OLD.slot_a, OLD.slot_b);
END;
