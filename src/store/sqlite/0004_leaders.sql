-- Leader leases for the maintenance chores: one row per chore, held until expires_at (ms).
CREATE TABLE leaders (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
