-- Cancelling runs on an event (issue 27, `cancel_on` / `cancelOn`). A job's list is kept as JSON
-- in `jobs.cancel_on`. Each run of such a job is armed when it is created: one row of
-- `run_cancel_keys` per entry whose match field its event has, keyed like a wait for an event
-- (name, match path, the run's event's value there), disarmed at `until` (NULL: never) and
-- deleted when the run ends. The insert of an event looks the runs it cancels up by that key in
-- its own transaction (an index lookup); `cancel_paths` lists the match paths in use per event
-- name, as `wait_paths` does for waits (rows are few and kept).
-- `event_effects` links an event to the runs it did not start but resumed (a wait for it) or
-- cancelled, for the event's page and the run's `cancelledBy`; deleted with either side.

ALTER TABLE jobs ADD COLUMN cancel_on text;
CREATE TABLE run_cancel_keys (
    run_id      text NOT NULL,
    n           int NOT NULL,                  -- the entry's position in the job's list
    event_name  text NOT NULL,
    match_path  text NOT NULL,                 -- payload.<field>… or ''
    match_value text NOT NULL,                 -- the run's event's value there, or ''
    condition   text,                          -- CEL over `event` and `async`
    run_event   text,                          -- JSON {id, name, payload}, kept for the condition
    until       bigint,                        -- disarmed from then; NULL: while the run lasts
    PRIMARY KEY (run_id, n)
);
CREATE INDEX run_cancel_keys_match ON run_cancel_keys (event_name, match_path, match_value);
CREATE TABLE cancel_paths (
    event_name text NOT NULL,
    match_path text NOT NULL,
    PRIMARY KEY (event_name, match_path)
);
CREATE TABLE event_effects (
    event_id text NOT NULL,
    run_id   text NOT NULL,
    effect   text NOT NULL,                    -- 'resumed' | 'cancelled'
    at       bigint NOT NULL,
    PRIMARY KEY (event_id, effect, run_id)
);
CREATE INDEX event_effects_run ON event_effects (run_id);
