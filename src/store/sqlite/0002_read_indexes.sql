-- Indexes for the read side (JSON API, dashboard): every list walks an index newest first (by seq).

-- Event detail, run counts per event and the event status filter look runs up by event and state;
-- this index also serves every lookup by event_id alone, so it replaces runs_event.
DROP INDEX IF EXISTS runs_event;
CREATE INDEX runs_event_status ON runs (event_id, status);
-- Run list filtered by state, and by job and state. runs_job_status also serves the claim
-- (status = 'queued' AND job_id IN …): without it the claim read every run of the job via runs_job.
CREATE INDEX runs_status ON runs (status, seq);
CREATE INDEX runs_job_status ON runs (job_id, status, seq);
-- Statistics and job success rates count runs finished in a time window, by job and state:
-- covering, so the count never reads the table.
CREATE INDEX runs_finished ON runs (finished_at, job_id, status) WHERE finished_at IS NOT NULL;
-- Event list filtered by an exact source (`webhook:payments`, `job:<run id>`) ...
CREATE INDEX events_source ON events (source, seq);
-- ... or by its kind, the part before the colon (`job`, `replay`, `webhook`, `api`). The
-- expression must stay identical to SOURCE_KIND in query.rs, or the planner will not use it.
CREATE INDEX events_source_kind ON events ((CASE WHEN instr(source, ':') > 0 THEN substr(source, 1, instr(source, ':') - 1) ELSE source END), seq);
