-- Pausing a job (issue 17): its runs are created as usual but not claimed until it is resumed.
ALTER TABLE jobs ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
