-- One job id, one owner (issue 25): when a job changes owner (a job defined in code displacing an
-- endpoint's job with its id, or an endpoint taking over a job no running process defines), the
-- change is noted on the job, for the jobs page.
ALTER TABLE jobs ADD COLUMN owner_note text;
ALTER TABLE jobs ADD COLUMN owner_noted_at bigint;
