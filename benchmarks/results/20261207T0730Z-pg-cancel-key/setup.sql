DROP DATABASE IF EXISTS scratch_cancel;
CREATE DATABASE scratch_cancel;
\c scratch_cancel
CREATE TABLE runs (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE, event_id text NOT NULL);
CREATE TABLE run_queue (seq bigint PRIMARY KEY);
CREATE TABLE run_cancel_keys (run_id text NOT NULL, n int NOT NULL, event_name text NOT NULL, match_path text NOT NULL, match_value text NOT NULL, condition text, run_event text, until bigint, PRIMARY KEY (run_id, n));
CREATE INDEX run_cancel_keys_match ON run_cancel_keys (event_name, match_path, match_value);
CREATE INDEX run_cancel_keys_key ON run_cancel_keys USING hash ((event_name || ' ' || match_path || ' ' || match_value));
INSERT INTO runs (id, event_id) SELECT 'run_' || i, 'evt_' || i FROM generate_series(1, 100000) i;
INSERT INTO run_queue SELECT seq FROM runs;
INSERT INTO run_cancel_keys (run_id, n, event_name, match_path, match_value) SELECT 'run_' || i, 0, 'order.cancelled', 'payload.orderId', substr(md5(i::text), 1, 16) FROM generate_series(1, 100000) i;
VACUUM ANALYZE;
CREATE OR REPLACE FUNCTION cancel_bench(mode text, hit boolean, n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz; vals text[]; joined text[]; names text[]; paths text[]; c int; i int;
BEGIN
  names := array_fill('order.cancelled'::text, ARRAY[10]);
  paths := array_fill('payload.orderId'::text, ARRAY[10]);
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    IF hit THEN
      vals := ARRAY(SELECT substr(md5((((i * 10 + j) % 100000) + 1)::text), 1, 16) FROM generate_series(1, 10) j);
    ELSE
      vals := ARRAY(SELECT 'none_' || (i * 10 + j) FROM generate_series(1, 10) j);
    END IF;
    joined := ARRAY(SELECT 'order.cancelled payload.orderId ' || v FROM unnest(vals) v);
    IF mode = 'btree' THEN
      SELECT count(*) INTO c FROM run_cancel_keys k
        JOIN (SELECT DISTINCT * FROM unnest(names, paths, vals)) AS q(n, p, v)
          ON k.event_name = q.n AND k.match_path = q.p AND k.match_value = q.v
        JOIN runs r ON r.id = k.run_id
        WHERE EXISTS (SELECT 1 FROM run_queue rq WHERE rq.seq = r.seq);
    ELSIF mode = 'hash' THEN
      SELECT count(*) INTO c FROM run_cancel_keys k JOIN runs r ON r.id = k.run_id
        WHERE (k.event_name || ' ' || k.match_path || ' ' || k.match_value) = ANY(joined)
          AND EXISTS (SELECT 1 FROM run_queue rq WHERE rq.seq = r.seq);
    END IF;
    IF hit AND c <> 10 AND mode <> 'none' THEN RAISE EXCEPTION 'found % of 10', c; END IF;
  END LOOP;
  RETURN mode || ' ' || CASE WHEN hit THEN 'matching' ELSE 'non-matching' END || ': ' || round(extract(epoch from clock_timestamp() - t0) * 1e6 / n, 1) || ' us per lookup of 10 values';
END $$;
