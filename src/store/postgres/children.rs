//! The runs a run invokes (`io.invoke`, `io.invoke_all`) on PostgreSQL: started with their steps
//! and their parent's waits in one transaction per 1,000 children (`CHUNK`), and the lock that makes a
//! parent resume once, when its last child ended (fan-in).
//!
//! **Fan-in.** A parent has one wait row per child it waits for (`run_waits`, name
//! `flare/job.invoked`, matched on the child's run id), written with the child. The transaction
//! that ends a child deletes that row and makes the parent due only when no other such row is
//! left. Two children of one parent ending at once in two transactions would each still see the
//! other's row and neither would wake the parent, so every transaction that ends runs first
//! takes a lock per parent (an advisory lock keyed by the parent's id, `waits::LOCK_PARENTS_SQL`,
//! in a statement of its own) and looks at the parent's rows in a later statement: the second one
//! waits for the first's commit and sees its deletion.

use super::rows::{exec, rows};
use super::PgStore;
use crate::model::wait::{INVOKE_EVENT, INVOKE_PATH};
use crate::store::{Error, Lease, NewChild, Result};

/// The most children written in one transaction: a fan-out of thousands is committed in parts,
/// so the first children run while the next are written.
const CHUNK: usize = 1_000;

/// The steps of new children (waiting, their child's id as output) and their parent's waits;
/// `$1` run id, `$2` keys, `$3` child ids, `$4` attempt, `$5` since, `$6` until. A step that
/// failed (its child did, in an earlier attempt) is replaced: this is its next invocation.
const CHILD_STEPS_SQL: &str = "WITH u AS ( \
       SELECT * FROM unnest($2::text[], $3::text[]) AS u(key, child)), \
     s AS (INSERT INTO run_steps (run_id, key, kind, status, attempt, started_at, wait_until, output) \
       SELECT $1, u.key, 'invoke', 'waiting', $4, $5, $6, json_build_object('runId', u.child)::text FROM u \
       ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, \
         attempt = excluded.attempt, started_at = excluded.started_at, finished_at = NULL, \
         wait_until = excluded.wait_until, output = excluded.output, error = NULL \
       WHERE run_steps.status <> 'succeeded') \
     INSERT INTO run_waits (run_id, step_key, event_name, match_path, match_value, since, until) \
     SELECT $1, u.key, $7, $8, u.child, $5, $6 FROM u \
     ON CONFLICT (run_id, step_key) DO UPDATE SET event_name = excluded.event_name, \
       match_path = excluded.match_path, match_value = excluded.match_value, \
       since = excluded.since, until = excluded.until";

impl PgStore {
    /// See [`crate::store::Store::runs_invoke`]: one transaction per [`CHUNK`] children (the
    /// children's events without fan-out, their counts, their runs and queue rows, the parent's
    /// steps and waits), each committed and the workers woken before the next is written.
    pub async fn runs_invoke(
        &self,
        lease: Lease,
        job_id: String,
        attempt: u32,
        children: Vec<NewChild>,
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        let mut client = self.conn().await?;
        super::rows::triggers_refresh(&client, self.triggers()).await?;
        let job = self.triggers().get(&job_id).ok_or(Error::NotFound {
            what: "job",
            id: job_id,
        })?;
        // A rate-limited job's children in one transaction: a refusal leaves none of them.
        let chunk = if job.rate_limit.is_some() {
            children.len().max(1)
        } else {
            CHUNK
        };
        let mut ids = Vec::with_capacity(children.len());
        for part in children.chunks(chunk) {
            match self
                .invoke_chunk(&mut client, &lease, &job, attempt, part, now)
                .await?
            {
                Some(some) => ids.extend(some),
                None => return Ok(None),
            }
        }
        Ok(Some(ids))
    }

    /// One transaction of [`Self::runs_invoke`].
    async fn invoke_chunk(
        &self,
        client: &mut deadpool_postgres::Object,
        lease: &Lease,
        job: &crate::model::JobSpec,
        attempt: u32,
        children: &[NewChild],
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        let tx = self.begin(client).await?;
        let held = rows(
            &tx,
            "SELECT 1 FROM run_queue q JOIN runs r ON r.seq = q.seq \
             WHERE r.id = $1 AND q.lease_token = $2 AND q.lease_until IS NOT NULL FOR SHARE OF q",
            &[&lease.run_id, &lease.token],
        )
        .await?;
        if held.is_empty() {
            return Ok(None);
        }
        let source = format!("job:{}", lease.run_id);
        let ids: Vec<&str> = children.iter().map(|c| c.event_id.as_str()).collect();
        let payloads: Vec<&str> = children.iter().map(|c| c.payload.get()).collect();
        let created: std::collections::HashSet<String> = rows(
            &tx,
            "INSERT INTO events (id, name, payload, source, parent_run_id, timestamp, delivered_at) \
             SELECT u.id, $3, u.payload, $4, $5, $6, $6 FROM unnest($1::text[], $2::text[]) AS u(id, payload) \
             ORDER BY u.id ON CONFLICT (id) DO NOTHING RETURNING id",
            &[&ids, &payloads, &INVOKE_EVENT, &source, &lease.run_id, &now],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
        // Children started before (an execution that stopped before it waited): found again.
        let mut existing: std::collections::HashMap<String, String> = rows(
            &tx,
            "SELECT DISTINCT ON (event_id) event_id, id FROM runs WHERE event_id = ANY($1) ORDER BY event_id, seq",
            &[&ids],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_>>()?;
        let mut runs = super::new_runs::NewRuns::default();
        let mut child_ids = Vec::with_capacity(children.len());
        let mut new_keys = Vec::new();
        let mut new_children = Vec::new();
        let mut new_until = Vec::new();
        for c in children {
            let child = if created.contains(&c.event_id) {
                // Queued like any run of its job: its concurrency slots, rate limit and start
                // timeout apply.
                let payload = c.payload_for(job)?;
                let fields = crate::model::EventFields {
                    id: &c.event_id,
                    name: INVOKE_EVENT,
                    payload: &payload,
                    context: None,
                    source: &source,
                };
                let id = runs.add(job, &fields, now);
                new_keys.push(c.key.as_str());
                new_children.push(id.clone());
                new_until.push(c.until);
                id
            } else {
                existing.remove(&c.event_id).unwrap_or_default()
            };
            child_ids.push(child);
        }
        if !created.is_empty() {
            exec(
                &tx,
                "INSERT INTO event_counts (minute, shard, n) VALUES ($1::int8 / 60000, pg_backend_pid() % 16, $2) \
                 ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + excluded.n",
                &[&now, &i64::try_from(created.len()).unwrap_or(i64::MAX)],
            )
            .await?;
            exec(&tx, super::writer::INSERT_RUNS_SQL, &runs.params()).await?;
            super::cancel_on::arm(&tx, &runs.cancel_keys).await?;
            if job.rate_limit.is_some() {
                let made = rows(
                    &tx,
                    "SELECT 1 FROM runs WHERE id = ANY($1)",
                    &[&new_children],
                )
                .await?
                .len();
                if made < new_children.len() {
                    // Rolled back with the transaction: nothing of the batch stays.
                    return Err(Error::Conflict(format!(
                        "the rate limit of job {:?} started no run for some invoke steps",
                        job.id
                    )));
                }
            }
            // One statement per timeout (children of one call share it).
            let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
            let mut at = 0;
            while at < new_keys.len() {
                let until = new_until[at];
                let end = new_until[at..]
                    .iter()
                    .position(|u| *u != until)
                    .map_or(new_keys.len(), |n| at + n);
                exec(
                    &tx,
                    CHILD_STEPS_SQL,
                    &[
                        &lease.run_id,
                        &&new_keys[at..end],
                        &&new_children[at..end],
                        &attempt,
                        &now,
                        &until,
                        &INVOKE_EVENT,
                        &INVOKE_PATH,
                    ],
                )
                .await?;
                at = end;
            }
        }
        if !created.is_empty() {
            // Any process may run the children's job: each is told at commit.
            super::flow::notify(&tx).await?;
        }
        tx.commit().await?;
        if !created.is_empty() {
            self.wake();
        }
        Ok(Some(child_ids))
    }
}
