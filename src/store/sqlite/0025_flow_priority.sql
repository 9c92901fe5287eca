-- Priority (issue 26): a job's `priority` is a CEL expression giving seconds (−600 … 600),
-- evaluated when a run is created; the run keeps the offset in ms (`priority_ms`, NULL for 0).
-- Among due runs the claim takes the lowest *rank*, `run_at - priority_ms`, first: a run with
-- priority p as if it had become due p seconds earlier, never before it is due.
--
-- Runs without a priority stay in the queue indexes they were in (`runs_runnable`, and
-- `runs_slot_queue` for runs with slots), now without the runs that have one, so their claim and
-- its cost are unchanged. Runs with a priority have two indexes of their own: `runs_ranked` in
-- rank order (the claim walks it from the lowest rank, up to now + 600 s, taking the due ones)
-- and `runs_ranked_due` in due order (the next due time, the queue's counts). The claim merges
-- the two streams by rank. The rank is an expression of `run_at`, so a retried or waiting run
-- keeps its offset from its new due time without any write knowing about priorities.
-- `slot_a` and `priority_ms` are columns of the indexes whose conditions name them, and
-- `status = 'queued'` is the last term of each condition (SQLite takes a partial index's
-- `col = constant` as the column's value only from the last term of a condition of three), so
-- reads of the queue (counts, lists) stay index-only.

ALTER TABLE jobs ADD COLUMN priority TEXT;       -- the CEL expression; NULL: none
ALTER TABLE runs ADD COLUMN priority_ms INTEGER; -- NULL: priority 0

DROP INDEX IF EXISTS runs_runnable;
CREATE INDEX runs_runnable ON runs (run_at, seq, job_id, slot_a, priority_ms)
    WHERE slot_a IS NULL AND priority_ms IS NULL AND status = 'queued';
DROP INDEX IF EXISTS runs_slot_queue;
CREATE INDEX runs_slot_queue ON runs (slot_a, run_at, seq, job_id, priority_ms)
    WHERE slot_a IS NOT NULL AND priority_ms IS NULL AND status = 'queued';

CREATE INDEX runs_ranked ON runs (run_at - priority_ms, seq, job_id)
    WHERE slot_a IS NULL AND priority_ms IS NOT NULL AND status = 'queued';
CREATE INDEX runs_ranked_due ON runs (run_at, job_id, slot_a, priority_ms)
    WHERE slot_a IS NULL AND priority_ms IS NOT NULL AND status = 'queued';
CREATE INDEX runs_slot_ranked ON runs (slot_a, run_at - priority_ms, seq, job_id)
    WHERE slot_a IS NOT NULL AND priority_ms IS NOT NULL AND status = 'queued';
CREATE INDEX runs_slot_ranked_due ON runs (slot_a, run_at, job_id, priority_ms)
    WHERE slot_a IS NOT NULL AND priority_ms IS NOT NULL AND status = 'queued';
