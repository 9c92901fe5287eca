-- Debounce (issue 26): a burst of events for one key becomes one run, started `periodMs` after
-- the last of them (never past `timeoutMs` after the first), with the last event's payload.
-- `flow_debounces` holds, per job and key, the run of the current window and when the window
-- opened; its primary key is the one open window per job and key, and its row lock orders the
-- events of one key, whichever writer or process inserts them.
--
-- The event insert calls `flow_debounce` in its transaction, after the events are inserted,
-- with the debounced runs of the new ones in order. For each: lock the key's row; fold the
-- event into the window's run while its queue row has no lease and the run never started (the
-- run takes the event, its start moves back, the run's previous event is linked to it in
-- `event_debounces`); otherwise open a new window with a new run (its rate limit taken first).
-- The fold updates the queue row with a condition on the lease: a claim that took the run
-- first makes it fail (a run that started is not changed), and one that comes after finds
-- the run due later.

ALTER TABLE jobs ADD COLUMN debounce text;      -- {"periodMs", "key"?, "timeoutMs"?}; NULL: none

CREATE TABLE flow_debounces (
    job_id   text NOT NULL,
    key      text NOT NULL,
    run_id   text,                              -- the window's run; NULL before the first
    first_at bigint NOT NULL,                   -- when the window opened, ms
    PRIMARY KEY (job_id, key)
);
CREATE INDEX flow_debounces_run ON flow_debounces (run_id);

-- An event folded into a later event's run: the run it now belongs to.
CREATE TABLE event_debounces (
    event_id text NOT NULL,
    job_id   text NOT NULL,
    run_id   text NOT NULL,
    PRIMARY KEY (event_id, job_id)
);

-- The runs of debounced jobs for new events (`p_event[i]` for job `p_job[i]`, key `p_key[i]`,
-- at `p_at[i]`), in order per job and key: returns each one's run (`ord` = i; NULL: over its
-- rate limit). `p_run[i]` is the id of a new run, its columns those of the insert in
-- `writer.rs`; `p_timeout` is the debounce's timeout and `p_start_timeout` the job's start
-- timeout (ms, NULL: none).
CREATE FUNCTION flow_debounce(p_event text[], p_job text[], p_key text[], p_at bigint[],
                              p_period bigint[], p_timeout bigint[], p_run text[],
                              p_version text[], p_max_attempts integer[], p_slot_a text[],
                              p_slot_b text[], p_start_timeout bigint[], p_rate_key text[],
                              p_rate_limit integer[], p_rate_period bigint[],
                              p_rate_reason text[])
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
                slot_a = p_slot_a[i], slot_b = p_slot_b[i]
            WHERE q.seq = (SELECT r.seq FROM runs r WHERE r.id = w.run_id AND r.started_at IS NULL)
              AND q.lease_until IS NULL AND q.started_at IS NULL
            RETURNING q.seq, q.run_at INTO v_seq, v_due;
        END IF;
        IF v_seq IS NOT NULL THEN
            UPDATE run_queue q SET expires_at = v_due + p_start_timeout[i] WHERE q.seq = v_seq;
            SELECT r.event_id INTO v_previous FROM runs r WHERE r.seq = v_seq;
            UPDATE runs r SET event_id = p_event[i], run_at = v_due,
                slot_a = p_slot_a[i], slot_b = p_slot_b[i]
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
                          run_at, created_at, slot_a, slot_b)
            VALUES (p_run[i], p_event[i], p_job[i], p_version[i], 'queued', 0, p_max_attempts[i],
                    v_due, p_at[i], p_slot_a[i], p_slot_b[i])
            RETURNING seq INTO v_seq;
        INSERT INTO run_queue (seq, job_id, run_at, slot_a, slot_b, expires_at)
            VALUES (v_seq, p_job[i], v_due, p_slot_a[i], p_slot_b[i], v_due + p_start_timeout[i]);
        UPDATE flow_debounces d SET run_id = p_run[i], first_at = p_at[i]
            WHERE d.job_id = p_job[i] AND d.key = p_key[i];
        ord := i;
        run_id := p_run[i];
        RETURN NEXT;
    END LOOP;
END $$;
