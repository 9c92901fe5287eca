-- Cancelling runs on an event (issue 27, `cancel_on` / `cancelOn`). A job's list is kept as JSON
-- in `jobs.cancel_on`. Each run of such a job is armed when it is created: one row of
-- `run_cancel_keys` per entry whose match field its event has, keyed like a wait for an event
-- (name, match path, the run's event's value there), disarmed at `until` (NULL: never) and
-- deleted when the run ends. The insert of an event looks the runs it cancels up by that key in
-- its own transaction (an index lookup); `cancel_paths` lists the match paths in use per event
-- name, as `wait_paths` does for waits (rows are few and kept).
-- `event_effects` links an event to the runs it did not start but resumed (a wait for it) or
-- cancelled, for the event's page and the run's `cancelledBy`; deleted with either side.

ALTER TABLE jobs ADD COLUMN cancel_on TEXT;
CREATE TABLE run_cancel_keys (
    run_id      TEXT NOT NULL,
    n           INTEGER NOT NULL,              -- the entry's position in the job's list
    event_name  TEXT NOT NULL,
    match_path  TEXT NOT NULL,                 -- payload.<field>… or ''
    match_value TEXT NOT NULL,                 -- the run's event's value there, or ''
    condition   TEXT,                          -- CEL over `event` and `async`
    run_event   TEXT,                          -- JSON {id, name, payload}, kept for the condition
    until       INTEGER,                       -- disarmed from then; NULL: while the run lasts
    PRIMARY KEY (run_id, n)
) WITHOUT ROWID;
CREATE INDEX run_cancel_keys_match ON run_cancel_keys (event_name, match_path, match_value);
CREATE TABLE cancel_paths (
    event_name TEXT NOT NULL,
    match_path TEXT NOT NULL,
    PRIMARY KEY (event_name, match_path)
) WITHOUT ROWID;
CREATE TABLE event_effects (
    event_id TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    effect   TEXT NOT NULL,                    -- 'resumed' | 'cancelled'
    at       INTEGER NOT NULL,
    PRIMARY KEY (event_id, effect, run_id)
) WITHOUT ROWID;
CREATE INDEX event_effects_run ON event_effects (run_id);
