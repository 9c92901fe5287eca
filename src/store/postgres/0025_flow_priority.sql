-- Priority (issue 26): a job's `priority` is a CEL expression giving seconds (−600 … 600),
-- evaluated when a run is created; the run keeps the offset in ms (`priority_ms`, NULL for 0),
-- on its queue row and on its run row (a retry queues it again with it). Among due runs the
-- claim takes the lowest *rank*, `run_at - priority_ms`, first: a run with priority p as if it
-- had become due p seconds earlier, never before it is due.
--
-- Queue rows without a priority stay in the indexes they were in (`run_queue_due`, and
-- `run_queue_slot` for runs with slots), now without the rows that have one, so their claim and
-- its cost are unchanged. Rows with a priority have two indexes of their own each: in rank order
-- (the claim walks it from the lowest rank, up to now + 600 s, taking the due ones) and in due
-- order (the next due time). The claim merges the two streams by rank. The rank is an
-- expression of `run_at`, so a retried or waiting run keeps its offset from its new due time
-- without any write knowing about priorities.

ALTER TABLE jobs ADD COLUMN priority text;          -- the CEL expression; NULL: none
ALTER TABLE runs ADD COLUMN priority_ms bigint;     -- NULL: priority 0
ALTER TABLE run_queue ADD COLUMN priority_ms bigint;

DROP INDEX run_queue_due;
CREATE INDEX run_queue_due ON run_queue (run_at, seq)
    WHERE lease_until IS NULL AND slot_a IS NULL AND priority_ms IS NULL;
DROP INDEX run_queue_slot;
CREATE INDEX run_queue_slot ON run_queue (slot_a, run_at, seq)
    WHERE lease_until IS NULL AND slot_a IS NOT NULL AND priority_ms IS NULL;

CREATE INDEX run_queue_ranked ON run_queue ((run_at - priority_ms), seq)
    WHERE lease_until IS NULL AND slot_a IS NULL AND priority_ms IS NOT NULL;
CREATE INDEX run_queue_ranked_due ON run_queue (run_at)
    WHERE lease_until IS NULL AND slot_a IS NULL AND priority_ms IS NOT NULL;
CREATE INDEX run_queue_slot_ranked ON run_queue (slot_a, (run_at - priority_ms), seq)
    WHERE lease_until IS NULL AND slot_a IS NOT NULL AND priority_ms IS NOT NULL;
CREATE INDEX run_queue_slot_ranked_due ON run_queue (slot_a, run_at)
    WHERE lease_until IS NULL AND slot_a IS NOT NULL AND priority_ms IS NOT NULL;

-- `0022_flow_throttle.sql`'s claim, taking from each slot its lowest ranks: the oldest due runs
-- without a priority and the lowest-ranked due runs with one, merged.
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
    due bigint;
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
            WHERE q.seq = ANY(ARRAY(SELECT c.seq FROM (
                SELECT * FROM (SELECT r.seq, r.run_at AS rank FROM run_queue r
                    WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.priority_ms IS NULL
                      AND r.run_at <= p_now
                      AND (r.expires_at IS NULL OR r.expires_at > p_now OR r.started_at IS NOT NULL)
                    ORDER BY r.run_at, r.seq LIMIT n FOR UPDATE SKIP LOCKED) plain
                UNION ALL
                SELECT * FROM (SELECT r.seq, r.run_at - r.priority_ms AS rank FROM run_queue r
                    WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.priority_ms IS NOT NULL
                      AND r.run_at - r.priority_ms <= p_now + 600000 AND r.run_at <= p_now
                      AND (r.expires_at IS NULL OR r.expires_at > p_now OR r.started_at IS NOT NULL)
                    ORDER BY r.run_at - r.priority_ms, r.seq LIMIT n FOR UPDATE SKIP LOCKED) ranked
                ) c ORDER BY c.rank, c.seq LIMIT n))
            RETURNING q.seq, q.attempt)
            SELECT taken.seq, taken.attempt FROM taken;
        GET DIAGNOSTICS n = ROW_COUNT;
        budget := budget - n;
        free_b := free_b - n;
        due := LEAST(
            (SELECT min(r.run_at) FROM run_queue r
             WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.priority_ms IS NULL),
            (SELECT min(r.run_at) FROM run_queue r
             WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.priority_ms IS NOT NULL));
        IF s.thr_interval IS NULL THEN
            UPDATE flow_slots f SET next_due = due WHERE f.slot = s.slot;
        ELSE
            -- The starts made move the theoretical arrival time; the slot is due again no
            -- earlier than the next start the throttle allows.
            t := coalesce(s.tat, p_now);
            i := 0;
            WHILE i < n LOOP
                t := GREATEST(t, p_now) + s.thr_interval;
                i := i + 1;
            END LOOP;
            UPDATE flow_slots f SET tat = t,
                next_due = CASE WHEN due IS NULL THEN NULL
                    ELSE GREATEST(due, ceil(t - s.thr_tolerance)::bigint) END
            WHERE f.slot = s.slot;
        END IF;
        EXIT WHEN budget <= 0 OR free_b <= 0;
    END LOOP;
END $$;
