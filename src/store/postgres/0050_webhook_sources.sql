-- Webhook sources created through the API or the dashboard (issue 29): the settings as JSON
-- (scheme, rules for the event name and the delivery id; never a secret) and the secrets apart,
-- as a JSON array. Sources from the environment (payments, auth) and the start-up file are not
-- stored.
CREATE TABLE webhook_sources (
    id          text PRIMARY KEY,
    definition  text NOT NULL,
    secrets     text NOT NULL,
    created_at  bigint NOT NULL,
    updated_at  bigint NOT NULL
);

-- Refused deliveries per source, with the reason; the last 100 per source are kept.
CREATE TABLE webhook_rejections (
    seq     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source  text NOT NULL,
    at      bigint NOT NULL,
    status  integer NOT NULL,
    reason  text NOT NULL
);
CREATE INDEX webhook_rejections_recent ON webhook_rejections (source, seq);
