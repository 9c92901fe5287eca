//! The runs a run invokes (`io.invoke`, `io.invoke_all`) on SQLite: started with their steps in
//! one operation of the writer per 1,000 children (`CHUNK`). Each invoke step holds its child's
//! id, each child names its caller (`runs.awaited_by`), and the caller's count of children it
//! waits for (`children_waiting`) grows by the steps written; a child's end takes one off
//! (`waits::FanIn`), and the caller resumes once, when none is left (fan-in). Nothing per child
//! is written at its end: its step's outcome is read from the child run (`steps::steps_of`).
//! The one writer orders the children's ends.

use rusqlite::{params, OptionalExtension};

use super::SqliteStore;
use crate::model::wait::INVOKE_EVENT;
use crate::model::{StepKind, StepStatus};
use crate::store::{Error, Lease, NewChild, Result};

/// The step of a new child (waiting, its child's id as output and in `child_run_id`):
/// parameters run id, key, kind, status, attempt, since, until, output, child. A step that failed (its child did, in an earlier
/// attempt) is replaced: this is its next invocation.
const CHILD_STEP_SQL: &str = "INSERT INTO run_steps \
       (run_id, key, kind, status, attempt, started_at, wait_until, output, child_run_id) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
     ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, \
       attempt = excluded.attempt, started_at = excluded.started_at, finished_at = NULL, \
       wait_until = excluded.wait_until, output = excluded.output, error = NULL, \
       child_run_id = excluded.child_run_id \
     WHERE run_steps.status <> 'succeeded'";

/// The most children written in one operation of the writer: a fan-out of thousands is
/// committed in parts, so the first children run while the next are written.
const CHUNK: usize = 1_000;

impl SqliteStore {
    /// See [`crate::store::Store::runs_invoke`]: one operation of the writer per [`CHUNK`]
    /// children (a rate-limited job's in one: a refusal leaves none of them).
    pub async fn runs_invoke(
        &self,
        lease: Lease,
        job_id: String,
        attempt: u32,
        children: Vec<NewChild>,
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        let limited = self
            .triggers()
            .get(&job_id)
            .is_some_and(|job| job.rate_limit.is_some());
        let chunk = if limited {
            children.len().max(1)
        } else {
            CHUNK
        };
        let mut ids = Vec::with_capacity(children.len());
        let mut children = children.into_iter().peekable();
        while children.peek().is_some() {
            let part: Vec<NewChild> = children.by_ref().take(chunk).collect();
            match self
                .invoke_chunk(lease.clone(), job_id.clone(), attempt, part, now)
                .await?
            {
                Some(some) => ids.extend(some),
                None => return Ok(None),
            }
        }
        Ok(Some(ids))
    }

    /// One operation of [`Self::runs_invoke`].
    async fn invoke_chunk(
        &self,
        lease: Lease,
        job_id: String,
        attempt: u32,
        children: Vec<NewChild>,
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        self.write(move |ctx| {
            // The definitions as this batch's writer knows them (reloaded when they changed).
            let job = ctx.triggers.get(&job_id).ok_or(Error::NotFound {
                what: "job",
                id: job_id.clone(),
            })?;
            let held = ctx
                .conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')",
                )?
                .query_row(params![lease.run_id, lease.token], |r| r.get::<_, bool>(0))?;
            if !held {
                return Ok(None);
            }
            let source = format!("job:{}", lease.run_id);
            let mut ids = Vec::with_capacity(children.len());
            // The steps written, each waiting for its child: added to the parent's count.
            let mut waiting = 0;
            for c in &children {
                let created = ctx
                    .conn
                    .prepare_cached(
                        "INSERT INTO events (id, name, payload, source, parent_run_id, timestamp, delivered_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (id) DO NOTHING",
                    )?
                    .execute(params![
                        c.event_id,
                        INVOKE_EVENT,
                        c.payload.to_string(),
                        source,
                        lease.run_id,
                        now
                    ])?;
                if created == 0 {
                    // Started before (an execution that stopped before it waited): found again.
                    let child: Option<String> = ctx
                        .conn
                        .prepare_cached("SELECT id FROM runs WHERE event_id = ?1 ORDER BY rowid LIMIT 1")?
                        .query_row([&c.event_id], |r| r.get(0))
                        .optional()?;
                    ids.push(child.unwrap_or_default());
                    continue;
                }
                ctx.tally.events(now, 1);
                // Queued like any run of its job: its flow control applies.
                let fields = crate::model::EventFields {
                    id: &c.event_id,
                    name: INVOKE_EVENT,
                    payload: &c.payload,
                    context: None,
                    source: &source,
                };
                let Some(child) =
                    super::flow::run_insert_awaited(ctx.conn, &job, &fields, now, &lease.run_id)?
                else {
                    // Rolled back with this operation's savepoint: nothing of the batch stays.
                    return Err(Error::Conflict(format!(
                        "the rate limit of job {:?} started no run for invoke step {:?}",
                        job.id, c.key
                    )));
                };
                waiting += ctx.conn.prepare_cached(CHILD_STEP_SQL)?.execute(params![
                    lease.run_id,
                    c.key,
                    StepKind::Invoke.as_str(),
                    StepStatus::Waiting.as_str(),
                    attempt,
                    now,
                    c.until,
                    serde_json::json!({ "runId": child }).to_string(),
                    child,
                ])?;
                ctx.wake = true;
                ids.push(child);
            }
            if waiting > 0 {
                ctx.conn
                    .prepare_cached(
                        "INSERT INTO children_waiting (run_id, n) VALUES (?1, ?2) \
                         ON CONFLICT (run_id) DO UPDATE SET n = n + excluded.n",
                    )?
                    .execute(params![lease.run_id, waiting])?;
            }
            Ok(Some(ids))
        })
        .await
    }
}
