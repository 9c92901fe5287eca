-- Endpoints speak a protocol: Flare's own (`flare`, docs/endpoints.md) or Trigger.dev v2's
-- platform protocol (`trigger.dev-v2`, docs/trigger-dev-v2.md). For a v2 endpoint `secret` holds
-- the API key it was registered with (sent as `x-trigger-api-key`) and `client_id` the
-- TriggerClient's id (sent as `x-trigger-endpoint-id` on PING). `skipped` lists the jobs of its
-- last index that Flare could not take, with why (a JSON array of {id, reason}).
-- (Numbers 8 to 10 are other changes'; migrations are applied by number, each once.)
ALTER TABLE endpoints ADD COLUMN protocol TEXT NOT NULL DEFAULT 'flare';
ALTER TABLE endpoints ADD COLUMN client_id TEXT;
ALTER TABLE endpoints ADD COLUMN skipped TEXT NOT NULL DEFAULT '[]';
