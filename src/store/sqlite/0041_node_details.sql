-- Named workers and a workers page (issue 25): each node's beat also says which Flare version it
-- runs, its concurrency and how many runs it executes now.
ALTER TABLE nodes ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN running INTEGER NOT NULL DEFAULT 0;
