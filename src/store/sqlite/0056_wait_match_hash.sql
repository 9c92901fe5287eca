-- `run_waits` rebuilt as a rowid table whose match index holds a hash of the value waited for
-- (`match_hash`: the event name, match path and value, `waits::match_hash`) and the row's id:
-- some 200 entries a leaf instead of ~40 (the three texts and the run id and step of the
-- primary key). A sweep of the resumed waits (`swept.rs`) writes every leaf of that index that
-- holds one of them, and with values spread over the index that is most of its leaves: beside
-- 100,000 waits, ~2,400 leaves before, ~450 now. A lookup reads the rows of the hash
-- and compares the three texts, so two values of one hash are told apart. The run and step
-- stay unique; v2 invoke waits, looked up by their name and path, get a partial index of their
-- own. The rows are copied (the hash computed by `flare_match_hash`, which the migrating
-- connection has), and the log of inserts (`0054_wait_log.sql`) is triggered again.
CREATE TABLE run_waits_hashed (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL,
    step_key    TEXT NOT NULL,
    event_name  TEXT NOT NULL,
    match_path  TEXT NOT NULL,                 -- payload.<field>… or ''
    match_value TEXT NOT NULL,                 -- the run's event's value there, or ''
    match_hash  INTEGER NOT NULL,              -- of the three above
    condition   TEXT,                          -- CEL over `event` and `async`
    run_event   TEXT,                          -- JSON {id, name, payload}, kept for the condition
    since       INTEGER NOT NULL,              -- when the run reached the wait
    until       INTEGER NOT NULL,              -- its timeout
    resumed     INTEGER,                       -- when an event resumed it (0055), or NULL
    UNIQUE (run_id, step_key)
);
INSERT INTO run_waits_hashed
    (run_id, step_key, event_name, match_path, match_value, match_hash, condition, run_event,
     since, until, resumed)
SELECT run_id, step_key, event_name, match_path, match_value,
       flare_match_hash(event_name, match_path, match_value), condition, run_event,
       since, until, resumed
FROM run_waits ORDER BY since;
DROP TABLE run_waits;
ALTER TABLE run_waits_hashed RENAME TO run_waits;
CREATE INDEX run_waits_match ON run_waits (match_hash);
CREATE INDEX run_waits_resumed ON run_waits (resumed) WHERE resumed IS NOT NULL;
CREATE INDEX run_waits_invoke ON run_waits (match_path, match_value)
    WHERE event_name = 'flare/job.invoked';
CREATE TRIGGER run_waits_logged AFTER INSERT ON run_waits
BEGIN
    INSERT INTO wait_log (event_name, match_path, match_value)
    VALUES (NEW.event_name, NEW.match_path, NEW.match_value);
END;
