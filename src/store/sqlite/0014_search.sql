-- The payload search's trigram index (`search.rs`): a search for rare text over all time read
-- every payload (`LIKE '%text%'`, 0.6-0.9 s at a million events). Contentless and keyed by
-- events.seq: the payload stays stored once, in `events`, and pruning deletes index rows by seq.
-- The maintenance loop fills it behind `search_progress.indexed_seq`, a chunk per write; searches
-- scan the events above that watermark, so they are complete while it catches up. The watermark
-- starts at 0 so that this migration is instant whatever the history's size.
CREATE VIRTUAL TABLE event_search USING fts5(
    body,
    content = '',
    contentless_delete = 1,
    tokenize = 'trigram'
);

CREATE TABLE search_progress (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_seq INTEGER NOT NULL              -- every event with seq <= this is in event_search
);
INSERT INTO search_progress (id, indexed_seq) VALUES (1, 0);
