-- Throttles (issue 26): at most `limit` run starts per period per key, `burst` at once. Kept on
-- the run's first slot (`model::throttle`): the spacing of starts and the tolerance (from the
-- latest definition) and the theoretical arrival time of the next start (GCRA). The claim takes
-- from a throttled slot only as many runs as the throttle allows, then moves its `next_due` to
-- when the next start is allowed, so a throttled key is not read again before then.

ALTER TABLE jobs ADD COLUMN throttle TEXT;      -- {"limit", "periodMs", "burst", "key"?}
ALTER TABLE flow_slots ADD COLUMN thr_interval REAL;  -- ms between starts; NULL: no throttle
ALTER TABLE flow_slots ADD COLUMN thr_tolerance REAL; -- ms
ALTER TABLE flow_slots ADD COLUMN tat REAL;           -- ms; NULL: never started
