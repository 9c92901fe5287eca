-- Verified webhook deliveries: one row per provider delivery, written in the same transaction as
-- the events it produced. The UNIQUE key makes a provider's retry a no-op (dedupe).

CREATE TABLE webhook_deliveries (
    seq          INTEGER PRIMARY KEY,
    provider     TEXT NOT NULL,                 -- payments | auth
    delivery_id  TEXT NOT NULL,                 -- Stripe event id / svix-id
    received_at  INTEGER NOT NULL,
    event_type   TEXT NOT NULL,                 -- the provider's type, e.g. payment_intent.succeeded
    outcome      TEXT NOT NULL,                 -- accepted
    event_ids    TEXT NOT NULL,                 -- JSON array of the event ids it produced
    raw_body     BLOB NOT NULL,                 -- the exact bytes that were signed
    UNIQUE (provider, delivery_id)
);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (provider, seq);
