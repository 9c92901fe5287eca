-- A claim counts the runs it takes in their slots itself (`flow::claim_flow`): each slot's
-- queue update adds the runs taken from it, and one statement per claim adds them to their
-- second slots. The trigger did it one run at a time, each an update of `flow_slots` run as a
-- trigger program inside the claim's update of `runs` (issue 26: a keyed claim takes one run
-- per slot, so the slot row was written twice per run). Only a claim makes a run `running`.
-- The other triggers of `0020_flow_concurrency.sql` stay: every other change of a run's state
-- still counts itself.
DROP TRIGGER IF EXISTS runs_flow_take;
