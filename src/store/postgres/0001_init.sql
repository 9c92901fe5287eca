-- Flare schema, PostgreSQL. Times are milliseconds since the Unix epoch (bigint); JSON is stored
-- as text exactly as serialized (no jsonb normalization, and a payload with "\u0000" stays valid).

CREATE TABLE events (
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- keyset pagination
    id            text NOT NULL UNIQUE,
    name          text NOT NULL,
    payload       text NOT NULL,
    context       text,
    source        text NOT NULL,
    parent_run_id text,
    timestamp     bigint NOT NULL,
    deliver_at    bigint,
    delivered_at  bigint,
    cancelled_at  bigint
);
-- Scheduled events not delivered yet: the scheduler walks this small partial index.
CREATE INDEX events_due ON events (deliver_at) WHERE delivered_at IS NULL AND cancelled_at IS NULL;
CREATE INDEX events_name ON events (name, seq);
CREATE INDEX events_timestamp ON events (timestamp);
CREATE INDEX events_parent ON events (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX events_source ON events (source, seq);
-- The source's kind, the part before the colon; must stay identical to SOURCE_KIND in query.rs.
CREATE INDEX events_source_kind ON events ((split_part(source, ':', 1)), seq);

CREATE TABLE jobs (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    version      text NOT NULL,
    event        text NOT NULL,
    filter       text,
    max_attempts integer NOT NULL,
    timeout_ms   bigint NOT NULL,
    concurrency  integer,
    updated_at   bigint NOT NULL
);

-- The queue. Every run is updated several times (claim, heartbeat, completion): room on each page
-- for new row versions (fillfactor) and a vacuum that runs after 1% of the rows changed, not 20%.
CREATE TABLE runs (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           text NOT NULL UNIQUE,
    event_id     text NOT NULL,
    job_id       text NOT NULL,
    job_version  text NOT NULL,
    status       text NOT NULL,                 -- queued | running | succeeded | failed | cancelled
    attempt      integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    run_at       bigint NOT NULL,
    lease_until  bigint,
    lease_token  bigint,
    started_at   bigint,
    finished_at  bigint,
    output       text,
    error        text,
    created_at   bigint NOT NULL
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
-- Runnable runs only: the claim walks it in due order and stops at its batch.
CREATE INDEX runs_runnable ON runs (run_at, seq) WHERE status = 'queued';
-- Running runs by lease expiry, for the rescuer.
CREATE INDEX runs_leased ON runs (lease_until) WHERE status = 'running';
CREATE INDEX runs_event_status ON runs (event_id, status);
CREATE INDEX runs_status ON runs (status, seq);
CREATE INDEX runs_job ON runs (job_id, seq);
CREATE INDEX runs_job_status ON runs (job_id, status, seq);
CREATE INDEX runs_finished ON runs (finished_at, job_id, status) WHERE finished_at IS NOT NULL;

CREATE TABLE run_attempts (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL,
    attempt     integer NOT NULL,
    outcome     text NOT NULL,
    started_at  bigint,
    finished_at bigint NOT NULL,
    error       text
);
CREATE INDEX run_attempts_run ON run_attempts (run_id, seq);

CREATE TABLE run_logs (
    seq     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  text NOT NULL,
    attempt integer NOT NULL,
    level   text NOT NULL,
    message text NOT NULL,
    fields  text,
    at      bigint NOT NULL
);
CREATE INDEX run_logs_run ON run_logs (run_id, seq);

-- Verified webhook deliveries: one row per provider delivery, written in the same transaction as
-- the events it produced; the UNIQUE key makes a provider's retry a no-op.
CREATE TABLE webhook_deliveries (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     text NOT NULL,
    delivery_id  text NOT NULL,
    received_at  bigint NOT NULL,
    event_type   text NOT NULL,
    outcome      text NOT NULL,
    event_ids    text NOT NULL,                 -- JSON array of the event ids it produced
    raw_body     bytea NOT NULL,
    UNIQUE (provider, delivery_id)
);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (provider, seq);

-- Leader leases for the maintenance chores: one row per chore, held until expires_at (ms).
CREATE TABLE leaders (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at bigint NOT NULL
);
