-- Webhook sources created through the API or the dashboard (issue 29): the settings as JSON
-- (scheme, rules for the event name and the delivery id; never a secret) and the secrets apart,
-- as a JSON array, so no read meant for display touches them. Sources from the environment
-- (payments, auth) and from the start-up file are not stored.
CREATE TABLE webhook_sources (
    id          TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,
    secrets     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- Refused deliveries per source, with the reason (never a body, header value or secret); the
-- last 100 per source are kept (each insert deletes what falls out).
CREATE TABLE webhook_rejections (
    seq     INTEGER PRIMARY KEY,
    source  TEXT NOT NULL,
    at      INTEGER NOT NULL,
    status  INTEGER NOT NULL,
    reason  TEXT NOT NULL
);
CREATE INDEX webhook_rejections_recent ON webhook_rejections (source, seq);
