-- Flare schema, SQLite. Times are milliseconds since the Unix epoch; JSON is stored as text.

CREATE TABLE events (
    seq           INTEGER PRIMARY KEY,          -- insertion order, for keyset pagination
    id            TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    payload       TEXT NOT NULL,
    context       TEXT,
    source        TEXT NOT NULL,
    parent_run_id TEXT,
    timestamp     INTEGER NOT NULL,
    deliver_at    INTEGER,
    delivered_at  INTEGER,
    cancelled_at  INTEGER
);
CREATE INDEX events_due ON events (deliver_at) WHERE delivered_at IS NULL AND cancelled_at IS NULL;
CREATE INDEX events_name ON events (name, seq);
CREATE INDEX events_timestamp ON events (timestamp);
CREATE INDEX events_parent ON events (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    version      TEXT NOT NULL,
    event        TEXT NOT NULL,
    filter       TEXT,
    max_attempts INTEGER NOT NULL,
    timeout_ms   INTEGER NOT NULL,
    concurrency  INTEGER,
    updated_at   INTEGER NOT NULL
);

CREATE TABLE runs (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    event_id     TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    job_version  TEXT NOT NULL,
    status       TEXT NOT NULL,                 -- queued | running | succeeded | failed | cancelled
    attempt      INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    run_at       INTEGER NOT NULL,
    lease_until  INTEGER,
    lease_token  INTEGER,
    started_at   INTEGER,
    finished_at  INTEGER,
    output       TEXT,
    error        TEXT,
    created_at   INTEGER NOT NULL
);
CREATE INDEX runs_runnable ON runs (run_at, seq) WHERE status = 'queued';
CREATE INDEX runs_leased ON runs (lease_until) WHERE status = 'running';
CREATE INDEX runs_event ON runs (event_id);
CREATE INDEX runs_job ON runs (job_id, seq);

CREATE TABLE run_attempts (
    run_id      TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    error       TEXT
);
CREATE INDEX run_attempts_run ON run_attempts (run_id, attempt);

CREATE TABLE run_logs (
    seq     INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    level   TEXT NOT NULL,
    message TEXT NOT NULL,
    fields  TEXT,
    at      INTEGER NOT NULL
);
CREATE INDEX run_logs_run ON run_logs (run_id, seq);
