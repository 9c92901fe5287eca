-- A child run names the run waiting for it (`awaited_by`: its caller, whose invoke step holds
-- it), so a child's end finds its caller in the row the end writes (`RETURNING`) and takes one
-- off the caller's count (`children_waiting`), with no index to keep per child nor probe per
-- end. Cleared when the caller's step times out first (the child's later end takes nothing
-- off), and when an ended child is retried (its caller keeps the end it counted). Children
-- whose step still waits when this migration runs get their caller from their step: those
-- still running are counted when they end, and those that ended already (their end counted)
-- have their step written with their outcome if they are retried or pruned. The steps' index
-- of their children goes.
ALTER TABLE runs ADD COLUMN awaited_by TEXT;
UPDATE runs SET awaited_by = (
    SELECT s.run_id FROM run_steps s WHERE s.child_run_id = runs.id AND s.status = 'waiting')
WHERE id IN (SELECT child_run_id FROM run_steps WHERE child_run_id IS NOT NULL AND status = 'waiting');
DROP INDEX run_steps_child;
