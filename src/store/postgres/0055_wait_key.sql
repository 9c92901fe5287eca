-- An event whose name has waits looks its waiters up on every insert, by (name, match path, its
-- value at that path). Through `run_waits_match` (a B-tree on the three text columns) each value
-- is a descent of three pages with text comparisons: ~35 µs of the server's time for a batch of
-- ten values among 100,000 waits, ~10% of the rate of events that match nothing. This hash index
-- on the three joined by spaces finds each value in one bucket page (~4 µs for ten). A path may
-- hold spaces, so two keys can join to the same text: the lookup reads the rows' own columns and
-- keeps the exact ones (`postgres/waits.rs`). `run_waits_match` stays, for the lookups by name
-- and path (a parent's waits for its children).
CREATE INDEX run_waits_key ON run_waits USING hash ((event_name || ' ' || match_path || ' ' || match_value));
