-- Start timeouts (issue 26): a run not started `startTimeoutMs` after it became due is cancelled
-- ("expired before it started"). `expires_at` is set on the queue row when the run is created
-- (its job's start timeout after its due time); the claim does not start a run past it, and the
-- rescuer's pass cancels those (`run_queue_expiring`). A run that started once (`started_at`)
-- no longer expires; a retried one gets a queue row without it.

ALTER TABLE jobs ADD COLUMN start_timeout_ms bigint;
ALTER TABLE run_queue ADD COLUMN expires_at bigint;
CREATE INDEX run_queue_expiring ON run_queue (expires_at)
    WHERE expires_at IS NOT NULL AND lease_until IS NULL AND started_at IS NULL;
