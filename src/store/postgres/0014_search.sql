-- The payload search (`payload ILIKE '%text%'`) read every payload when the text was rare (0.6 s
-- and more at a million events). pg_trgm's GIN index answers LIKE and ILIKE with any pattern:
-- the planner reads the rows holding the text's trigrams and rechecks them. The index is kept by
-- the insert itself (GIN's pending list makes that a cheap append; BENCHMARKS.md has the cost).
-- Built here in the migration's transaction, so a large existing history waits for the build.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX events_payload_trgm ON events USING gin (payload gin_trgm_ops);
