-- Runs waiting for an event (`io.wait_for_event`): one row per pending wait, deleted when an
-- event resumes it (in the event insert's transaction) or its timeout ends it. An insert of an
-- event looks its waiters up by (name, match path, the incoming event's value at that path): an
-- index lookup. `wait_paths` lists the match paths in use per event name (empty: no match), so
-- the insert knows which values to compute; rows are few and kept.
CREATE TABLE run_waits (
    run_id      TEXT NOT NULL,
    step_key    TEXT NOT NULL,
    event_name  TEXT NOT NULL,
    match_path  TEXT NOT NULL,                 -- payload.<field>… or ''
    match_value TEXT NOT NULL,                 -- the run's event's value there, or ''
    condition   TEXT,                          -- CEL over `event` and `async`
    run_event   TEXT,                          -- JSON {id, name, payload}, kept for the condition
    since       INTEGER NOT NULL,              -- when the run reached the wait
    until       INTEGER NOT NULL,              -- its timeout
    PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;
CREATE INDEX run_waits_match ON run_waits (event_name, match_path, match_value);
CREATE TABLE wait_paths (
    event_name TEXT NOT NULL,
    match_path TEXT NOT NULL,
    PRIMARY KEY (event_name, match_path)
) WITHOUT ROWID;
