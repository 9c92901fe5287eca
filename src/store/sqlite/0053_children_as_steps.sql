-- The step of an invoked run (`io.invoke`, `io.invoke_all`) is its child run: a parent keeps no
-- row per child. A child names its step in its caller (`awaited_key`), the caller's attempt that
-- invoked it (`awaited_attempt`) and the step's timeout (`awaited_until`), beside its caller
-- (`awaited_by`, 0052); the step is read from the child while the child names its caller
-- (`steps::steps_of`: the children's run ids begin with their caller's `<run>-invoke`, so the
-- index of the runs' events finds them in one walk). A step is stored again when its child stops
-- naming its caller: at the step's timeout (failed), and when an ended child is retried or pruned
-- (its outcome). Invoke steps still waiting when this runs move onto their children.
ALTER TABLE runs ADD COLUMN awaited_key TEXT;
ALTER TABLE runs ADD COLUMN awaited_attempt INTEGER;
ALTER TABLE runs ADD COLUMN awaited_until INTEGER;
UPDATE runs SET awaited_key = s.key, awaited_attempt = s.attempt, awaited_until = s.wait_until
FROM run_steps s
WHERE s.child_run_id = runs.id AND s.run_id = runs.awaited_by AND s.status = 'waiting';
DELETE FROM run_steps WHERE status = 'waiting' AND child_run_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM runs c WHERE c.id = run_steps.child_run_id
              AND c.awaited_by = run_steps.run_id AND c.awaited_key = run_steps.key);
