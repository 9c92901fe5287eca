CREATE OR REPLACE FUNCTION probe_bench(tbl text, n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz; t1 timestamptz; vals text[]; keys int8[]; c int; i int;
BEGIN
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    vals := ARRAY(SELECT substr(md5((i*10+j)::text),1,16) FROM generate_series(1,10) j);
  END LOOP;
  t1 := clock_timestamp();
  RAISE NOTICE 'values only: % us', round(extract(epoch from t1-t0)*1e6/n, 1);
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    vals := ARRAY(SELECT substr(md5((i*10+j)::text),1,16) FROM generate_series(1,10) j);
    keys := ARRAY(SELECT hashtextextended(v, 0) FROM unnest(vals) v);
    IF tbl = 'k' THEN
      SELECT count(*) INTO c FROM (SELECT NULL::text, event_name FROM wait_paths WHERE event_name = ANY('{bench.signal}') UNION ALL SELECT w.run_id, w.event_name FROM run_waits_k w WHERE w.match_key = ANY(keys)) s;
    ELSIF tbl = 'e' THEN
      SELECT count(*) INTO c FROM (SELECT NULL::text, event_name FROM wait_paths WHERE event_name = ANY('{bench.signal}') UNION ALL SELECT w.run_id, w.event_name FROM run_waits w WHERE w.event_name = 'bench.signal' AND w.match_path = 'payload.k' AND w.match_value = ANY('{}'::text[])) s;
    ELSIF tbl = 'p' THEN
      SELECT count(*) INTO c FROM (SELECT NULL::text, event_name FROM wait_paths WHERE event_name = ANY('{bench.signal}')) s;
    ELSIF tbl = 'c' THEN
      SELECT count(*) INTO c FROM (SELECT NULL::text, event_name FROM wait_paths WHERE event_name = ANY('{bench.signal}') UNION ALL SELECT w.run_id, w.event_name FROM run_waits_c w WHERE w.event_name = 'bench.signal' AND w.match_path = 'payload.k' AND w.match_value = ANY(vals)) s;
    ELSIF tbl = 'h' THEN
      SELECT count(*) INTO c FROM (SELECT NULL::text, event_name FROM wait_paths WHERE event_name = ANY('{bench.signal}') UNION ALL SELECT w.run_id, w.event_name FROM run_waits_h w WHERE w.event_name = 'bench.signal' AND w.match_path = 'payload.k' AND w.match_value = ANY(vals)) s;
    ELSE
      SELECT count(*) INTO c FROM (SELECT NULL::text, event_name FROM wait_paths WHERE event_name = ANY('{bench.signal}') UNION ALL SELECT w.run_id, w.event_name FROM run_waits w WHERE w.event_name = 'bench.signal' AND w.match_path = 'payload.k' AND w.match_value = ANY(vals)) s;
    END IF;
  END LOOP;
  t1 := clock_timestamp();
  RETURN tbl || ': ' || round(extract(epoch from t1-t0)*1e6/n, 1) || ' us per statement (incl. values)';
END $$;
