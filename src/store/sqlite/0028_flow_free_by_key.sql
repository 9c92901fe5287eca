-- The triggers that count a run leaving `running` (`0020_flow_concurrency.sql`) updated its
-- slots with `WHERE slot IN (NEW.slot_a, NEW.slot_b)`: an IN list of two values, for which
-- SQLite builds an ephemeral table each time the trigger runs, once per run in a completion of
-- a keyed job (issue 26: a tenth of the completion's time in the keyed drain). One update per
-- slot, each by its primary key, instead; a run without a second slot updates nothing there.
DROP TRIGGER IF EXISTS runs_flow_free;
CREATE TRIGGER runs_flow_free AFTER UPDATE OF status ON runs
    WHEN NEW.slot_a IS NOT NULL AND OLD.status = 'running' AND NEW.status <> 'running'
BEGIN
    UPDATE flow_slots SET running = running - 1 WHERE slot = NEW.slot_a;
    UPDATE flow_slots SET running = running - 1 WHERE slot = NEW.slot_b;
END;
DROP TRIGGER IF EXISTS runs_flow_gone;
CREATE TRIGGER runs_flow_gone AFTER DELETE ON runs
    WHEN OLD.slot_a IS NOT NULL AND OLD.status = 'running'
BEGIN
    UPDATE flow_slots SET running = running - 1 WHERE slot = OLD.slot_a;
    UPDATE flow_slots SET running = running - 1 WHERE slot = OLD.slot_b;
END;
