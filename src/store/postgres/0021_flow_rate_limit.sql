-- Rate limits (issue 26): at most `limit` runs of a job created per period per key. The insert
-- that fans an event out calls `flow_rate_take` for each run of a rate-limited job: it keeps,
-- per job and key, the creation times of the runs within the period (`hits`, at most `limit`),
-- locked for the transaction; an event beyond the limit starts no run of the job and
-- `event_skips` says why.

ALTER TABLE jobs ADD COLUMN rate_limit text;      -- {"limit", "periodMs", "key"?}; NULL: none

CREATE TABLE flow_rates (
    job_id text NOT NULL,
    key    text NOT NULL,
    hits   bigint[] NOT NULL,                      -- ms, ascending
    PRIMARY KEY (job_id, key)
);

CREATE TABLE event_skips (
    event_id text NOT NULL,
    job_id   text NOT NULL,
    reason   text NOT NULL,
    PRIMARY KEY (event_id, job_id)
);

-- Whether event `p_event` may create a run of `p_job` for key `p_key` at `p_now` under a limit
-- of `p_limit` per `p_period` ms: true records the creation; false records the skip.
CREATE FUNCTION flow_rate_take(p_event text, p_job text, p_key text, p_limit integer,
                               p_period bigint, p_now bigint, p_reason text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    kept bigint[];
BEGIN
    INSERT INTO flow_rates (job_id, key, hits) VALUES (p_job, p_key, '{}')
        ON CONFLICT (job_id, key) DO NOTHING;
    SELECT ARRAY(SELECT t FROM unnest(r.hits) AS t WHERE t > p_now - p_period ORDER BY t)
        INTO kept FROM flow_rates r WHERE r.job_id = p_job AND r.key = p_key FOR UPDATE;
    IF coalesce(array_length(kept, 1), 0) >= p_limit THEN
        UPDATE flow_rates SET hits = kept WHERE job_id = p_job AND key = p_key;
        INSERT INTO event_skips (event_id, job_id, reason) VALUES (p_event, p_job, p_reason)
            ON CONFLICT DO NOTHING;
        RETURN false;
    END IF;
    UPDATE flow_rates SET hits = kept || p_now WHERE job_id = p_job AND key = p_key;
    RETURN true;
END $$;
