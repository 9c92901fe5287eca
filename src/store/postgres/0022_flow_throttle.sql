-- Throttles (issue 26): at most `limit` run starts per period per key, `burst` at once. Kept on
-- the run's first slot (`model::throttle`): the spacing of starts and the tolerance (from the
-- latest definition) and the theoretical arrival time of the next start (GCRA). `flow_claim`
-- takes from a throttled slot only as many runs as the throttle allows, then moves its
-- `next_due` to when the next start is allowed, so a throttled key is not read again before then.

ALTER TABLE jobs ADD COLUMN throttle text;      -- {"limit", "periodMs", "burst", "key"?}
ALTER TABLE flow_slots
    ADD COLUMN thr_interval double precision,   -- ms between starts; NULL: no throttle
    ADD COLUMN thr_tolerance double precision,  -- ms
    ADD COLUMN tat double precision;            -- ms; NULL: never started

CREATE OR REPLACE FUNCTION flow_claim(p_job text, p_b text, p_now bigint, p_lease bigint,
                                      p_token bigint, p_node text, p_limit integer)
RETURNS TABLE (claimed_seq bigint, claimed_attempt integer) LANGUAGE plpgsql AS $$
DECLARE
    budget integer := p_limit;
    free_b integer := p_limit;
    s record;
    n integer;
    t double precision;
    i integer;
BEGIN
    IF EXISTS (SELECT 1 FROM jobs j WHERE j.id = p_job AND j.paused) THEN
        RETURN;
    END IF;
    IF p_b IS NOT NULL THEN
        SELECT f.cap - f.running INTO free_b FROM flow_slots f WHERE f.slot = p_b FOR UPDATE;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF free_b <= 0 THEN
            RETURN;
        END IF;
    END IF;
    FOR s IN SELECT f.slot, f.cap - f.running AS room, f.thr_interval, f.thr_tolerance, f.tat
             FROM flow_slots f
             WHERE f.job_id = p_job AND f.next_due IS NOT NULL AND f.running < f.cap
               AND f.next_due <= p_now
             ORDER BY f.next_due LIMIT budget FOR UPDATE SKIP LOCKED
    LOOP
        n := LEAST(s.room, budget, free_b);
        IF s.thr_interval IS NOT NULL THEN
            -- As many starts as the throttle allows now.
            t := coalesce(s.tat, p_now);
            i := 0;
            WHILE i < n AND t - s.thr_tolerance <= p_now LOOP
                t := GREATEST(t, p_now) + s.thr_interval;
                i := i + 1;
            END LOOP;
            n := i;
        END IF;
        RETURN QUERY WITH taken AS (
            UPDATE run_queue q SET lease_until = p_lease, lease_token = p_token,
                attempt = q.attempt + 1, started_at = p_now, node = p_node
            WHERE q.seq = ANY(ARRAY(SELECT r.seq FROM run_queue r
                WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.run_at <= p_now
                  -- not past its start timeout (the column is 0023's; a function's body is
                  -- resolved when it runs)
                  AND (r.expires_at IS NULL OR r.expires_at > p_now OR r.started_at IS NOT NULL)
                ORDER BY r.run_at, r.seq LIMIT n FOR UPDATE SKIP LOCKED))
            RETURNING q.seq, q.attempt)
            SELECT taken.seq, taken.attempt FROM taken;
        GET DIAGNOSTICS n = ROW_COUNT;
        budget := budget - n;
        free_b := free_b - n;
        IF s.thr_interval IS NULL THEN
            UPDATE flow_slots f SET next_due = (SELECT min(r.run_at) FROM run_queue r
                WHERE r.slot_a = s.slot AND r.lease_until IS NULL)
            WHERE f.slot = s.slot;
        ELSE
            -- The starts made move the theoretical arrival time; the slot is due again no
            -- earlier than the next start the throttle allows.
            t := coalesce(s.tat, p_now);
            i := 0;
            WHILE i < n LOOP
                t := GREATEST(t, p_now) + s.thr_interval;
                i := i + 1;
            END LOOP;
            UPDATE flow_slots f SET tat = t, next_due = (SELECT CASE WHEN min(r.run_at) IS NULL THEN NULL
                    ELSE GREATEST(min(r.run_at), ceil(t - s.thr_tolerance)::bigint) END
                FROM run_queue r WHERE r.slot_a = s.slot AND r.lease_until IS NULL)
            WHERE f.slot = s.slot;
        END IF;
        EXIT WHEN budget <= 0 OR free_b <= 0;
    END LOOP;
END $$;
