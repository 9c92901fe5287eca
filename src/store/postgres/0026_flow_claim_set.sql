-- The claim of a limited job, set-based (issue 26: a drain with a limit of 1 per key over
-- 10,000 keys at least half as fast as the plain drain). `0025_flow_priority.sql`'s
-- `flow_claim` spent four statements per slot (take its runs, two lookups of its next due time,
-- write it), and with a limit of 1 per key a slot is a run. Now, while no slot read is
-- throttled and no queued run with slots has a priority (the usual case), the function takes
-- the runs of every slot with room in one statement (each slot's oldest due runs, at most its
-- room, through `run_queue_slot`) and writes every slot's next due time in a second; otherwise
-- it walks the slots one by one as before. Either way the slots are locked first, in due order
-- (`SKIP LOCKED`: a slot another process is claiming from is left to it), so no two processes
-- fill one slot past its limit. The claim counts the runs it takes in their slots itself, one
-- update per slot with its next due time (and one per second slot), where `flow_follow`'s
-- trigger updated the slot once per run taken: the trigger now counts only the runs that stop
-- running (a completion, a wait, a release, the rescuer, a cancel), and only `flow_claim` ever
-- leases a run with slots (the plain claim takes runs without).

-- Counts the runs a claim took in their second slots (`p_b`, one entry per run taken, NULL for
-- a run without one).
CREATE FUNCTION flow_count_second(p_b text[]) RETURNS void LANGUAGE sql AS $$
    UPDATE flow_slots f SET running = f.running + b.n
    FROM (SELECT x AS slot, count(*)::integer AS n FROM unnest(p_b) AS x
          WHERE x IS NOT NULL GROUP BY x) b
    WHERE f.slot = b.slot;
$$;

CREATE OR REPLACE FUNCTION flow_claim(p_job text, p_b text, p_now bigint, p_lease bigint,
                                      p_token bigint, p_node text, p_limit integer)
RETURNS TABLE (claimed_seq bigint, claimed_attempt integer) LANGUAGE plpgsql AS $$
DECLARE
    budget integer := p_limit;
    free_b integer := p_limit;
    v_slots text[];
    v_rooms integer[];
    v_slow boolean;
    v_seqs bigint[];
    v_attempts integer[];
    v_a text[];
    v_b text[];
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
    -- The slots with room and a due run, in due order, locked.
    SELECT array_agg(l.slot ORDER BY l.next_due, l.slot), array_agg(l.room ORDER BY l.next_due, l.slot),
           bool_or(l.thr_interval IS NOT NULL)
      INTO v_slots, v_rooms, v_slow
      FROM (SELECT f.slot, f.next_due, f.cap - f.running AS room, f.thr_interval FROM flow_slots f
            WHERE f.job_id = p_job AND f.next_due IS NOT NULL AND f.running < f.cap
              AND f.next_due <= p_now
            ORDER BY f.next_due LIMIT budget FOR UPDATE SKIP LOCKED) l;
    IF v_slots IS NULL THEN
        RETURN;
    END IF;
    -- Any queued run with slots and a priority (the first entry of its index)?
    v_slow := v_slow OR EXISTS (SELECT 1 FROM run_queue r
        WHERE r.lease_until IS NULL AND r.slot_a IS NOT NULL AND r.priority_ms IS NOT NULL);

    IF NOT v_slow THEN
        WITH picked AS (
            SELECT x.seq FROM unnest(v_slots, v_rooms) WITH ORDINALITY AS u(slot, room, ord)
            CROSS JOIN LATERAL (
                SELECT r.seq, r.run_at FROM run_queue r
                WHERE r.slot_a = u.slot AND r.lease_until IS NULL AND r.priority_ms IS NULL
                  AND r.run_at <= p_now
                  AND (r.expires_at IS NULL OR r.expires_at > p_now OR r.started_at IS NOT NULL)
                ORDER BY r.run_at, r.seq LIMIT u.room) x
            ORDER BY u.ord, x.run_at, x.seq LIMIT LEAST(budget, free_b)),
        -- No row lock while reading them: the runs of a slot are taken only under the slot's
        -- lock, which this claim holds; a run another writer changes meanwhile (a cancel, the
        -- rescuer) is checked again by the update, which skips it unless still queued.
        taken AS (
            UPDATE run_queue q SET lease_until = p_lease, lease_token = p_token,
                attempt = q.attempt + 1, started_at = p_now, node = p_node
            FROM picked WHERE q.seq = picked.seq AND q.lease_until IS NULL
            RETURNING q.seq, q.attempt, q.slot_a, q.slot_b)
        SELECT array_agg(t.seq), array_agg(t.attempt), array_agg(t.slot_a), array_agg(t.slot_b)
          INTO v_seqs, v_attempts, v_a, v_b FROM taken t;
        -- Every slot read: the runs taken from it counted, and its exact next due time (NULL:
        -- nothing queued).
        UPDATE flow_slots f SET running = f.running + c.n,
            next_due = (SELECT min(r.run_at) FROM run_queue r
                WHERE r.slot_a = f.slot AND r.lease_until IS NULL AND r.priority_ms IS NULL)
        FROM (SELECT u.slot, count(t.a)::integer AS n FROM unnest(v_slots) AS u(slot)
              LEFT JOIN unnest(v_a) AS t(a) ON t.a = u.slot GROUP BY u.slot) c
        WHERE f.slot = c.slot;
        PERFORM flow_count_second(v_b);
        RETURN QUERY SELECT * FROM unnest(v_seqs, v_attempts);
        RETURN;
    END IF;

    -- A throttle or priorities: slot by slot, as `0025_flow_priority.sql` did.
    FOR s IN SELECT f.slot, f.cap - f.running AS room, f.thr_interval, f.thr_tolerance, f.tat
             FROM unnest(v_slots) WITH ORDINALITY AS u(slot, ord)
             JOIN flow_slots f ON f.slot = u.slot ORDER BY u.ord
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
        WITH taken AS (
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
            RETURNING q.seq, q.attempt, q.slot_b)
        SELECT array_agg(t.seq), array_agg(t.attempt), array_agg(t.slot_b)
          INTO v_seqs, v_attempts, v_b FROM taken t;
        RETURN QUERY SELECT * FROM unnest(v_seqs, v_attempts);
        n := coalesce(cardinality(v_seqs), 0);
        PERFORM flow_count_second(v_b);
        budget := budget - n;
        free_b := free_b - n;
        due := LEAST(
            (SELECT min(r.run_at) FROM run_queue r
             WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.priority_ms IS NULL),
            (SELECT min(r.run_at) FROM run_queue r
             WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.priority_ms IS NOT NULL));
        IF s.thr_interval IS NULL THEN
            UPDATE flow_slots f SET running = f.running + n, next_due = due WHERE f.slot = s.slot;
        ELSE
            -- The starts made move the theoretical arrival time; the slot is due again no
            -- earlier than the next start the throttle allows.
            t := coalesce(s.tat, p_now);
            i := 0;
            WHILE i < n LOOP
                t := GREATEST(t, p_now) + s.thr_interval;
                i := i + 1;
            END LOOP;
            UPDATE flow_slots f SET running = f.running + n, tat = t,
                next_due = CASE WHEN due IS NULL THEN NULL
                    ELSE GREATEST(due, ceil(t - s.thr_tolerance)::bigint) END
            WHERE f.slot = s.slot;
        END IF;
        EXIT WHEN budget <= 0 OR free_b <= 0;
    END LOOP;
END $$;

-- `0020_flow_concurrency.sql`'s counts, now only of runs that stop running (the claim counts
-- the runs it takes), and without the statement on the second slot of a run that has none
-- (most limited jobs): each is a statement run per row changed.
CREATE OR REPLACE FUNCTION flow_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.slot_b IS NOT NULL THEN
            UPDATE flow_slots SET running = running - 1 WHERE slot = OLD.slot_b;
        END IF;
        UPDATE flow_slots SET running = running - 1 WHERE slot = OLD.slot_a;
    ELSIF OLD.lease_until IS NOT NULL AND NEW.lease_until IS NULL THEN
        IF NEW.slot_b IS NOT NULL THEN
            UPDATE flow_slots SET running = running - 1 WHERE slot = NEW.slot_b;
        END IF;
        UPDATE flow_slots SET running = running - 1, next_due = LEAST(next_due, NEW.run_at)
        WHERE slot = NEW.slot_a;
    ELSIF NEW.lease_until IS NULL THEN
        UPDATE flow_slots SET next_due = LEAST(next_due, NEW.run_at) WHERE slot = NEW.slot_a;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER run_queue_flow_update ON run_queue;
CREATE TRIGGER run_queue_flow_update AFTER UPDATE OF lease_until, run_at ON run_queue FOR EACH ROW
    WHEN (NEW.slot_a IS NOT NULL AND ((OLD.lease_until IS NOT NULL AND NEW.lease_until IS NULL)
          OR (NEW.lease_until IS NULL AND NEW.run_at < OLD.run_at)))
    EXECUTE FUNCTION flow_follow();
