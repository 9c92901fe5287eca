-- Every change of a run's status rewrites an entry in each of its indexes (a status change is
-- never a HOT update), so each index costs the queue on every claim and completion. The status
-- indexes now cover only the rare outcomes (failed, cancelled): queued and running runs are found
-- through runs_runnable and runs_leased, succeeded ones are most runs and a walk down the primary
-- key finds them. Measured in BENCHMARKS.md (PostgreSQL, issue 5).
DROP INDEX runs_status;
DROP INDEX runs_job_status;
CREATE INDEX runs_failed ON runs (status, seq) WHERE status IN ('failed', 'cancelled');
CREATE INDEX runs_job_failed ON runs (job_id, status, seq) WHERE status IN ('failed', 'cancelled');
