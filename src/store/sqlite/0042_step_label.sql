-- Trigger.dev v2 tasks on the run page (issue 25): a step's display label (the task's name and
-- key as the SDK gave them), beside its key, which for a v2 task is a 64-hex idempotency hash.
ALTER TABLE run_steps ADD COLUMN label TEXT;
