-- Start timeouts (issue 26): a run not started `startTimeoutMs` after it became due is cancelled
-- ("expired before it started"). `expires_at` is set when the run is created (its job's start
-- timeout after its due time) and cleared when it is retried; the claim does not start a run past
-- it, and the rescuer's pass cancels those (`runs_expiring` holds the queued ones that expire).

ALTER TABLE jobs ADD COLUMN start_timeout_ms INTEGER;
ALTER TABLE runs ADD COLUMN expires_at INTEGER;
CREATE INDEX runs_expiring ON runs (expires_at)
    WHERE status = 'queued' AND expires_at IS NOT NULL AND started_at IS NULL;
