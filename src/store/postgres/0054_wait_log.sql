-- The values waited for, per (event name, match path) pair in the order they were registered:
-- how a process's event writers learn which waits others registered since they last looked, to
-- keep their sets of the values waited for (`values.rs`), which spare an event no run waits for
-- its lookup of `run_waits_match`. A registration holds its event name's lock exclusively until
-- it commits (`waits.rs`), bumps the pair's `seq` and appends its value under it: each pair's
-- entries are contiguous and committed in `seq` order. Registrations delete a pair's entries
-- older than the last 65,536. Waits for children and callbacks have no pair and no entries.
ALTER TABLE wait_paths ADD COLUMN seq bigint NOT NULL DEFAULT 0;
CREATE TABLE wait_log (
    event_name  text NOT NULL,
    match_path  text NOT NULL,
    seq         bigint NOT NULL,
    match_value text NOT NULL,
    PRIMARY KEY (event_name, match_path, seq)
);
