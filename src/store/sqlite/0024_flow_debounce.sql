-- Debounce (issue 26): a burst of events for one key becomes one run, started `periodMs` after
-- the last of them (never past `timeoutMs` after the first), with the last event's payload.
-- `flow_debounces` holds, per job and key, the run of the current window and when the window
-- opened. The insert of an event folds it into that run while the run is queued and has never
-- started (the run takes the new event, its start moves back, the run's previous event is
-- linked to it in `event_debounces`); otherwise the event opens a new window with a new run.
-- Both happen in the writer's operation that inserts the event.

ALTER TABLE jobs ADD COLUMN debounce TEXT;      -- {"periodMs", "key"?, "timeoutMs"?}; NULL: none

CREATE TABLE flow_debounces (
    job_id   TEXT NOT NULL,
    key      TEXT NOT NULL,
    run_id   TEXT NOT NULL,                     -- the window's run
    first_at INTEGER NOT NULL,                  -- when the window opened, ms
    PRIMARY KEY (job_id, key)
) WITHOUT ROWID;
CREATE INDEX flow_debounces_run ON flow_debounces (run_id);

-- An event folded into a later event's run: the run it now belongs to.
CREATE TABLE event_debounces (
    event_id TEXT NOT NULL,
    job_id   TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    PRIMARY KEY (event_id, job_id)
) WITHOUT ROWID;
