-- HTTP job endpoints and the nodes that run jobs (issue 13).
--
-- `endpoints`: an application that serves jobs at a URL. `jobs` holds its last accepted index as
-- the endpoint sent it (validated JSON array), which every node turns into job definitions; the
-- `jobs` table gets one row per indexed job, marked with `endpoint_id`, for fan-out and the
-- dashboard. `updated_at` is the revision nodes watch to pick up changes.
CREATE TABLE endpoints (
    id            text PRIMARY KEY,
    url           text NOT NULL UNIQUE,
    secret        text NOT NULL,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    indexed_at    bigint,
    jobs          text NOT NULL DEFAULT '[]',
    last_ok_at    bigint,
    last_error_at bigint,
    errors        text NOT NULL DEFAULT '[]'   -- recent errors, newest first: [{"at": ms, "message": …}]
);

ALTER TABLE jobs ADD COLUMN endpoint_id text;

-- Every process running jobs says which jobs it defines, every few seconds; a job no live node
-- defines is flagged instead of leaving its runs queued silently.
CREATE TABLE nodes (
    id         text PRIMARY KEY,
    started_at bigint NOT NULL,
    seen_at    bigint NOT NULL,
    jobs       text NOT NULL                    -- JSON array of job ids
);
