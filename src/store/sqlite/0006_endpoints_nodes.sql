-- HTTP job endpoints and the nodes that run jobs (issue 13).
--
-- `endpoints`: an application that serves jobs at a URL. `jobs` holds its last accepted index as
-- the endpoint sent it (validated JSON array), which every node turns into job definitions; the
-- `jobs` table gets one row per indexed job, marked with `endpoint_id`, for fan-out and the
-- dashboard. `updated_at` is the revision nodes watch to pick up changes.
CREATE TABLE endpoints (
    id            TEXT PRIMARY KEY,
    url           TEXT NOT NULL UNIQUE,
    secret        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    indexed_at    INTEGER,
    jobs          TEXT NOT NULL DEFAULT '[]',
    last_ok_at    INTEGER,
    last_error_at INTEGER,
    errors        TEXT NOT NULL DEFAULT '[]'   -- recent errors, newest first: [{"at": ms, "message": …}]
);

ALTER TABLE jobs ADD COLUMN endpoint_id TEXT;

-- Every process running jobs says which jobs it defines, every few seconds; a job no live node
-- defines is flagged instead of leaving its runs queued silently.
CREATE TABLE nodes (
    id         TEXT PRIMARY KEY,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    jobs       TEXT NOT NULL                    -- JSON array of job ids
);
