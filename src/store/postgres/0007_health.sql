-- The readiness probe's row: `/readyz` upserts it to check that the database takes writes.
CREATE TABLE health (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at BIGINT NOT NULL
);
