-- Cluster-wide concurrency limits (issue 26). A run of a job with limits takes one or two
-- *slots* (`model::flow`): `slot_a`, the job's own (`key:<job>:<value>` or `job:<job>`), which
-- is also the queue it waits in, and `slot_b`, a second limit (`job:<job>` or `group:<name>`).
-- `flow_slots` counts the runs executing (holding a lease) in each slot; the triggers on
-- `run_queue` keep the counts with every change of a lease, whoever makes it (claim,
-- completion, wait, release, rescue, cancel), so a run whose worker died holds its slots until
-- the rescuer takes it back.
--
-- The claim of a limited job is `flow_claim`: it reads `flow_slots_free` (slots with room and a
-- due run: `next_due` is a lower bound of the due times of their queued runs, made exact by the
-- claim that finds it stale), locks each slot it takes from (`SKIP LOCKED`) and the second
-- slot (waiting), so no two processes fill one slot past its limit. A slot at its limit is not
-- in that index, so a key holding a backlog costs a claim nothing; runs with slots are not in
-- `run_queue_due` either (the plain claim walks only runs without).

ALTER TABLE jobs ADD COLUMN concurrency_limits text;     -- JSON list of limits; NULL: none
ALTER TABLE runs ADD COLUMN slot_a text, ADD COLUMN slot_b text;
ALTER TABLE run_queue ADD COLUMN slot_a text, ADD COLUMN slot_b text;

CREATE TABLE flow_slots (
    slot     text PRIMARY KEY,
    job_id   text,                 -- the job whose queue it is; NULL for a group
    cap      integer NOT NULL,     -- from the latest definition
    running  integer NOT NULL DEFAULT 0,
    next_due bigint                -- NULL: no queued run
) WITH (fillfactor = 50);
CREATE INDEX flow_slots_free ON flow_slots (job_id, next_due)
    WHERE next_due IS NOT NULL AND running < cap;

DROP INDEX run_queue_due;
CREATE INDEX run_queue_due ON run_queue (run_at, seq) WHERE lease_until IS NULL AND slot_a IS NULL;
CREATE INDEX run_queue_slot ON run_queue (slot_a, run_at, seq)
    WHERE lease_until IS NULL AND slot_a IS NOT NULL;

-- Every writer locks a run's second slot before its first (`group:` < `job:` < `key:`, the
-- order of the event insert's upsert and of the claim), so two never wait for each other in
-- opposite orders over one run's slots.
CREATE FUNCTION flow_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE flow_slots SET running = running - 1 WHERE slot = OLD.slot_b;
        UPDATE flow_slots SET running = running - 1 WHERE slot = OLD.slot_a;
    ELSIF OLD.lease_until IS NULL AND NEW.lease_until IS NOT NULL THEN
        UPDATE flow_slots SET running = running + 1 WHERE slot = NEW.slot_b;
        UPDATE flow_slots SET running = running + 1 WHERE slot = NEW.slot_a;
    ELSIF OLD.lease_until IS NOT NULL AND NEW.lease_until IS NULL THEN
        UPDATE flow_slots SET running = running - 1 WHERE slot = NEW.slot_b;
        UPDATE flow_slots SET running = running - 1, next_due = LEAST(next_due, NEW.run_at)
        WHERE slot = NEW.slot_a;
    ELSIF NEW.lease_until IS NULL THEN
        UPDATE flow_slots SET next_due = LEAST(next_due, NEW.run_at) WHERE slot = NEW.slot_a;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER run_queue_flow_update AFTER UPDATE OF lease_until, run_at ON run_queue FOR EACH ROW
    WHEN (NEW.slot_a IS NOT NULL AND ((OLD.lease_until IS NULL) <> (NEW.lease_until IS NULL)
          OR (NEW.lease_until IS NULL AND NEW.run_at < OLD.run_at)))
    EXECUTE FUNCTION flow_follow();
CREATE TRIGGER run_queue_flow_delete AFTER DELETE ON run_queue FOR EACH ROW
    WHEN (OLD.slot_a IS NOT NULL AND OLD.lease_until IS NOT NULL)
    EXECUTE FUNCTION flow_follow();

-- Claims up to `p_limit` due runs of limited job `p_job` whose second slot is `p_b`: slots with
-- room in due order, from each at most its room (and the second slot's), oldest due first.
-- Returns the queue rows taken and their attempt numbers.
CREATE FUNCTION flow_claim(p_job text, p_b text, p_now bigint, p_lease bigint, p_token bigint,
                           p_node text, p_limit integer)
RETURNS TABLE (claimed_seq bigint, claimed_attempt integer) LANGUAGE plpgsql AS $$
DECLARE
    budget integer := p_limit;
    free_b integer := p_limit;
    s record;
    n integer;
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
    FOR s IN SELECT f.slot, f.cap - f.running AS room FROM flow_slots f
             WHERE f.job_id = p_job AND f.next_due IS NOT NULL AND f.running < f.cap
               AND f.next_due <= p_now
             ORDER BY f.next_due LIMIT budget FOR UPDATE SKIP LOCKED
    LOOP
        n := LEAST(s.room, budget, free_b);
        RETURN QUERY WITH taken AS (
            UPDATE run_queue q SET lease_until = p_lease, lease_token = p_token,
                attempt = q.attempt + 1, started_at = p_now, node = p_node
            WHERE q.seq = ANY(ARRAY(SELECT r.seq FROM run_queue r
                WHERE r.slot_a = s.slot AND r.lease_until IS NULL AND r.run_at <= p_now
                ORDER BY r.run_at, r.seq LIMIT n FOR UPDATE SKIP LOCKED))
            RETURNING q.seq, q.attempt)
            SELECT taken.seq, taken.attempt FROM taken;
        GET DIAGNOSTICS n = ROW_COUNT;
        budget := budget - n;
        free_b := free_b - n;
        UPDATE flow_slots f SET next_due = (SELECT min(r.run_at) FROM run_queue r
            WHERE r.slot_a = s.slot AND r.lease_until IS NULL)
        WHERE f.slot = s.slot;
        EXIT WHEN budget <= 0 OR free_b <= 0;
    END LOOP;
END $$;
