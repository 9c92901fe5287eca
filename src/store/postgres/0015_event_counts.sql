-- Events received per minute, for the statistics and the overview: those counted every event of
-- their window (a scan of up to a day of history per request). Kept by the statements that
-- insert and prune events (`ops.rs`), in their transaction, so the counts always equal a count of
-- the rows; `rollups_drift` checks it in the tests.
--
-- Spread over a few rows per minute (`shard`, the writing backend's pid modulo 16): every insert
-- adds to the current minute, and one row per minute would make concurrent inserting
-- transactions wait for each other's commit on its lock. Readers sum the shards.
CREATE TABLE event_counts (
    minute  bigint NOT NULL,                   -- timestamp / 60000
    shard   smallint NOT NULL,
    n       bigint NOT NULL,
    PRIMARY KEY (minute, shard)
);
INSERT INTO event_counts (minute, shard, n)
    SELECT timestamp / 60000, 0, count(*) FROM events GROUP BY 1;
