-- The values waited for, appended as each `run_waits` row is inserted (by any process), in order
-- of `seq`: how one process's writer learns which waits others registered since it last looked,
-- to keep its set of the values waited for (`values.rs`), which spares an event no run waits for
-- its lookup of `run_waits_match`. `seq` is SQLite's largest plus one: contiguous, as the writers
-- only ever delete from the front (keeping the last 65,536 entries).
CREATE TABLE wait_log (
    seq         INTEGER PRIMARY KEY,
    event_name  TEXT NOT NULL,
    match_path  TEXT NOT NULL,
    match_value TEXT NOT NULL
);
CREATE TRIGGER run_waits_logged AFTER INSERT ON run_waits
BEGIN
    INSERT INTO wait_log (event_name, match_path, match_value)
    VALUES (NEW.event_name, NEW.match_path, NEW.match_value);
END;
