-- Tried as PostgreSQL migration 55 (`flare-coll`), not kept: the match keys compared as bytes.
ALTER TABLE run_waits
    ALTER COLUMN event_name TYPE text COLLATE "C",
    ALTER COLUMN match_path TYPE text COLLATE "C",
    ALTER COLUMN match_value TYPE text COLLATE "C";
ALTER TABLE run_cancel_keys
    ALTER COLUMN event_name TYPE text COLLATE "C",
    ALTER COLUMN match_path TYPE text COLLATE "C",
    ALTER COLUMN match_value TYPE text COLLATE "C";
