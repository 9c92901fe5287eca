-- Runs waiting for an event (`io.wait_for_event`): one row per pending wait, deleted when an
-- event resumes it (in the event insert's transaction) or its timeout ends it. An insert of an
-- event looks its waiters up by (name, match path, the incoming event's value at that path): an
-- index lookup. `wait_paths` lists the match paths in use per event name (empty: no match), so
-- the insert knows which values to compute; rows are few and kept. A wait's registration and
-- an event insert of the same name are ordered by an advisory lock (see `postgres/waits.rs`).
CREATE TABLE run_waits (
    run_id      text NOT NULL,
    step_key    text NOT NULL,
    event_name  text NOT NULL,
    match_path  text NOT NULL,                 -- payload.<field>… or ''
    match_value text NOT NULL,                 -- the run's event's value there, or ''
    condition   text,                          -- CEL over `event` and `async`
    run_event   text,                          -- JSON {id, name, payload}, kept for the condition
    since       bigint NOT NULL,               -- when the run reached the wait
    until       bigint NOT NULL,               -- its timeout
    PRIMARY KEY (run_id, step_key)
);
CREATE INDEX run_waits_match ON run_waits (event_name, match_path, match_value);
CREATE TABLE wait_paths (
    event_name text NOT NULL,
    match_path text NOT NULL,
    PRIMARY KEY (event_name, match_path)
);
