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

-- `0024_flow_debounce.sql`'s debounce, giving a debounced run the priority of its event (`p_priority[i]`,
-- ms): a new window's run, and the window's run when an event folds into it (as its slots).
DROP FUNCTION flow_debounce(text[], text[], text[], bigint[], bigint[], bigint[], text[], text[],
                            integer[], text[], text[], bigint[], text[], integer[], bigint[], text[]);
CREATE FUNCTION flow_debounce(p_event text[], p_job text[], p_key text[], p_at bigint[],
                              p_period bigint[], p_timeout bigint[], p_run text[],
                              p_version text[], p_max_attempts integer[], p_slot_a text[],
                              p_slot_b text[], p_start_timeout bigint[], p_rate_key text[],
                              p_rate_limit integer[], p_rate_period bigint[],
                              p_rate_reason text[], p_priority bigint[])
RETURNS TABLE (ord integer, run_id text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    i integer;
    w record;
    v_seq bigint;
    v_due bigint;
    v_previous text;
BEGIN
    FOR i IN SELECT o FROM generate_subscripts(p_event, 1) AS o
             ORDER BY p_job[o], p_key[o], o
    LOOP
        INSERT INTO flow_debounces (job_id, key, first_at) VALUES (p_job[i], p_key[i], p_at[i])
            ON CONFLICT (job_id, key) DO NOTHING;
        SELECT d.run_id, d.first_at INTO w FROM flow_debounces d
            WHERE d.job_id = p_job[i] AND d.key = p_key[i] FOR UPDATE;
        v_seq := NULL;
        IF w.run_id IS NOT NULL THEN
            -- The window's run, while no worker holds it and it never started.
            UPDATE run_queue q SET
                run_at = GREATEST(q.run_at, LEAST(p_at[i] + p_period[i], w.first_at + p_timeout[i])),
                slot_a = p_slot_a[i], slot_b = p_slot_b[i], priority_ms = p_priority[i]
            WHERE q.seq = (SELECT r.seq FROM runs r WHERE r.id = w.run_id AND r.started_at IS NULL)
              AND q.lease_until IS NULL AND q.started_at IS NULL
            RETURNING q.seq, q.run_at INTO v_seq, v_due;
        END IF;
        IF v_seq IS NOT NULL THEN
            UPDATE run_queue q SET expires_at = v_due + p_start_timeout[i] WHERE q.seq = v_seq;
            SELECT r.event_id INTO v_previous FROM runs r WHERE r.seq = v_seq;
            UPDATE runs r SET event_id = p_event[i], run_at = v_due,
                slot_a = p_slot_a[i], slot_b = p_slot_b[i], priority_ms = p_priority[i]
            WHERE r.seq = v_seq;
            INSERT INTO event_debounces (event_id, job_id, run_id)
                VALUES (v_previous, p_job[i], w.run_id) ON CONFLICT DO NOTHING;
            ord := i;
            run_id := w.run_id;
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- A new window: a new run, due a period from now.
        IF p_rate_key[i] IS NOT NULL AND NOT flow_rate_take(p_event[i], p_job[i], p_rate_key[i],
                p_rate_limit[i], p_rate_period[i], p_at[i], p_rate_reason[i]) THEN
            ord := i;
            run_id := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_due := p_at[i] + p_period[i];
        INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts,
                          run_at, created_at, slot_a, slot_b, priority_ms)
            VALUES (p_run[i], p_event[i], p_job[i], p_version[i], 'queued', 0, p_max_attempts[i],
                    v_due, p_at[i], p_slot_a[i], p_slot_b[i], p_priority[i])
            RETURNING seq INTO v_seq;
        INSERT INTO run_queue (seq, job_id, run_at, slot_a, slot_b, expires_at, priority_ms)
            VALUES (v_seq, p_job[i], v_due, p_slot_a[i], p_slot_b[i], v_due + p_start_timeout[i],
                    p_priority[i]);
        UPDATE flow_debounces d SET run_id = p_run[i], first_at = p_at[i]
            WHERE d.job_id = p_job[i] AND d.key = p_key[i];
        ord := i;
        run_id := p_run[i];
        RETURN NEXT;
    END LOOP;
END $$;
