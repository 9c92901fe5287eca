-- Scheduled jobs (cron or interval): one row per job with a schedule. The leader's scheduler
-- fires the rows whose next tick is due, inserting the tick's event and moving next_tick in
-- the same transaction.
CREATE TABLE schedules (
    job_id TEXT PRIMARY KEY,
    -- `cron:<expression>` or `interval:<ms>`
    spec TEXT NOT NULL,
    -- IANA time zone of a cron expression
    timezone TEXT,
    next_tick INTEGER NOT NULL,
    last_tick INTEGER
);
CREATE INDEX schedules_due ON schedules (next_tick);
