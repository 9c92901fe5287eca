-- A wait an event resumed is marked (`resumed`: when) instead of deleted in the event's insert,
-- and the writer deletes the marked rows many at a time (`swept.rs`). Deleting each wait as
-- it is resumed removed its entry from `run_waits_match` at once: one leaf of that index, which
-- lies anywhere in it as the values waited for do, written at each commit. Beside 100,000 waits
-- the index has ten times the leaves it has beside 10,000, and a batch of resumptions wrote
-- nearly as many leaves as it had events. Swept together, a leaf is written once for all the
-- marked entries it holds. Every read of `run_waits` passes over marked rows
-- (`resumed IS NULL`); `run_waits_resumed` finds them for the sweep without a scan.
ALTER TABLE run_waits ADD COLUMN resumed INTEGER;
CREATE INDEX run_waits_resumed ON run_waits (resumed) WHERE resumed IS NOT NULL;
