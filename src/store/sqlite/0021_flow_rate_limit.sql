-- Rate limits (issue 26): at most `limit` runs of a job created per period per key. The insert
-- that fans an event out keeps, per job and key, the creation times of the runs within the
-- period (`hits`, a JSON array, at most `limit` of them); an event beyond the limit starts no
-- run of the job and `event_skips` says why.

ALTER TABLE jobs ADD COLUMN rate_limit TEXT;      -- {"limit", "periodMs", "key"?}; NULL: none

CREATE TABLE flow_rates (
    job_id TEXT NOT NULL,
    key    TEXT NOT NULL,
    hits   TEXT NOT NULL,                          -- JSON array of ms, ascending
    PRIMARY KEY (job_id, key)
) WITHOUT ROWID;

CREATE TABLE event_skips (
    event_id TEXT NOT NULL,
    job_id   TEXT NOT NULL,
    reason   TEXT NOT NULL,
    PRIMARY KEY (event_id, job_id)
) WITHOUT ROWID;
