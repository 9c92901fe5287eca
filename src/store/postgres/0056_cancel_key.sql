-- An event whose name has `cancel_on` keys looks the runs it cancels up on every insert, by
-- (name, match path, its value at that path), as it looks its waiters up (`0055_wait_key.sql`):
-- through the B-tree `run_cancel_keys_match` each value is a descent of three pages with text
-- comparisons. This hash index on the three joined by spaces finds each value in one bucket page.
-- Keys that join alike are told apart by the rows' own columns (`postgres/cancel_on.rs`).
CREATE INDEX run_cancel_keys_key ON run_cancel_keys USING hash ((event_name || ' ' || match_path || ' ' || match_value));
