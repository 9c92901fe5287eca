//! The run lifecycle on PostgreSQL: claim, complete, heartbeat, release, rescue, cancel and
//! retry. Each is one statement in its own transaction, fenced by the lease token where a worker
//! writes, so a worker that lost its lease never overwrites the one that took over.

use std::collections::HashSet;

use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::ops::u32_of;
use super::{exec, rows, PgStore};
use crate::store::{ClaimParams, ClaimedRun, Completion, Error, Finish, Lease, Result};

/// The claim of one group: runnable runs of the jobs `$4`, oldest due first, at most `$5`, taken
/// with `FOR UPDATE SKIP LOCKED` so concurrent claimers never wait for nor share a run. The inner
/// select walks the partial index of queued runs in due order and stops at the limit.
pub(super) const CLAIM_SQL: &str =
    "UPDATE runs r SET status = 'running', attempt = r.attempt + 1, \
       started_at = $1, lease_until = $2, lease_token = $3, node = $6 \
     FROM events e \
     WHERE r.seq = ANY(ARRAY(SELECT seq FROM runs WHERE status = 'queued' AND run_at <= $1 \
         AND job_id = ANY($4) ORDER BY run_at, seq LIMIT $5 FOR UPDATE SKIP LOCKED)) \
       AND e.id = r.event_id \
     RETURNING r.id, r.event_id, e.name, r.job_id, r.attempt, r.max_attempts, e.payload";

/// Records a batch of finished attempts in one statement: each run is updated only while its lease
/// token still matches (fencing); attempts and logs are written for those alone. A success's
/// attempt is the run row itself (see [`crate::store::RunDetail::new`]): no attempt row.
const COMPLETE_SQL: &str = "WITH u AS ( \
       SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::text[], \
                            $7::text[], $8::int4[], $9::int8[]) \
         WITH ORDINALITY AS u(id, token, status, run_at, finished_at, output, error, attempt, started_at, ord)), \
     done AS ( \
       UPDATE runs r SET status = u.status, \
         run_at = CASE WHEN u.status = 'queued' THEN u.run_at ELSE r.run_at END, \
         finished_at = CASE WHEN u.status = 'queued' THEN r.finished_at ELSE u.finished_at END, \
         output = CASE WHEN u.status = 'succeeded' THEN u.output ELSE r.output END, \
         error = u.error, lease_until = NULL, lease_token = NULL \
       FROM u WHERE r.id = u.id AND r.lease_token = u.token AND r.status = 'running' \
       RETURNING r.id), \
     attempts AS ( \
       INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
       SELECT u.id, u.attempt, CASE WHEN u.status = 'queued' THEN 'retrying' ELSE u.status END, \
              u.started_at, u.finished_at, u.error \
       FROM u WHERE u.status <> 'succeeded' AND u.id IN (SELECT id FROM done) ORDER BY u.ord), \
     logs AS ( \
       INSERT INTO run_logs (run_id, attempt, level, message, fields, at) \
       SELECT l.run_id, l.attempt, l.level, l.message, l.fields, l.at \
       FROM unnest($10::text[], $11::int4[], $12::text[], $13::text[], $14::text[], $15::int8[]) \
            WITH ORDINALITY AS l(run_id, attempt, level, message, fields, at, ord) \
       WHERE l.run_id IN (SELECT id FROM done) ORDER BY l.ord) \
     SELECT id FROM done";

impl PgStore {
    /// See [`crate::store::Store::runs_claim`].
    pub async fn runs_claim(&self, p: ClaimParams) -> Result<Vec<ClaimedRun>> {
        let token: i64 = rand::random::<i64>() & i64::MAX;
        let groups: Vec<(&[String], i64)> = p
            .groups
            .iter()
            .filter(|g| g.limit > 0 && !g.jobs.is_empty())
            .map(|g| {
                (
                    g.jobs.as_slice(),
                    i64::try_from(g.limit).unwrap_or(i64::MAX),
                )
            })
            .collect();
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        // Each group's claim is one statement in its own transaction: nothing stays open.
        let client = self.conn().await?;
        let mut claimed = Vec::new();
        for (jobs, limit) in groups {
            for r in self
                .write_one_lazy(
                    &client,
                    CLAIM_SQL,
                    &[&p.now, &p.lease_until, &token, &jobs, &limit, &p.node],
                )
                .await?
            {
                claimed.push(ClaimedRun {
                    id: r.try_get(0)?,
                    event_id: r.try_get(1)?,
                    event_name: r.try_get(2)?,
                    job_id: r.try_get(3)?,
                    attempt: u32_of(&r, 4)?,
                    max_attempts: u32_of(&r, 5)?,
                    token,
                    payload: super::read::json_text(&r.try_get::<_, String>(6)?)?,
                    started_at: p.now,
                });
            }
        }
        Ok(claimed)
    }

    /// See [`crate::store::Store::runs_complete`]: the whole batch in one statement.
    pub async fn runs_complete(&self, completions: Vec<Completion>) -> Result<Vec<bool>> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let n = completions.len();
        let mut ids = Vec::with_capacity(n);
        let mut tokens = Vec::with_capacity(n);
        let mut statuses = Vec::with_capacity(n);
        let mut run_at: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut finished = Vec::with_capacity(n);
        let mut outputs: Vec<Option<String>> = Vec::with_capacity(n);
        let mut errors: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut attempts = Vec::with_capacity(n);
        let mut started = Vec::with_capacity(n);
        let (mut l_run, mut l_attempt, mut l_level, mut l_message, mut l_fields, mut l_at) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        let mut retry = false;
        for c in &completions {
            ids.push(c.run_id.as_str());
            tokens.push(c.token);
            finished.push(c.finished_at);
            attempts.push(i32::try_from(c.attempt).unwrap_or(i32::MAX));
            started.push(c.started_at);
            match &c.finish {
                Finish::Succeeded(output) => {
                    statuses.push("succeeded");
                    run_at.push(None);
                    outputs.push(Some(output.to_string()));
                    errors.push(None);
                }
                Finish::Retry { error, at } => {
                    retry = true;
                    statuses.push("queued");
                    run_at.push(Some(*at));
                    outputs.push(None);
                    errors.push(Some(error.as_str()));
                }
                Finish::Failed(error) => {
                    statuses.push("failed");
                    run_at.push(None);
                    outputs.push(None);
                    errors.push(Some(error.as_str()));
                }
            }
            for line in &c.logs {
                l_run.push(c.run_id.as_str());
                l_attempt.push(i32::try_from(line.attempt).unwrap_or(i32::MAX));
                l_level.push(line.level.as_str());
                l_message.push(line.message.as_str());
                l_fields.push(line.fields.as_ref().map(Value::to_string));
                l_at.push(line.at.timestamp_millis());
            }
        }
        let client = self.conn().await?;
        let held: HashSet<String> = self
            .write_one(
                &client,
                COMPLETE_SQL,
                &[
                    &ids, &tokens, &statuses, &run_at, &finished, &outputs, &errors, &attempts,
                    &started, &l_run, &l_attempt, &l_level, &l_message, &l_fields, &l_at,
                ],
            )
            .await?
            .iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<Result<_, _>>()?;
        if retry {
            self.wake();
        }
        Ok(completions
            .iter()
            .map(|c| held.contains(&c.run_id))
            .collect())
    }

    /// See [`crate::store::Store::runs_heartbeat`].
    pub async fn runs_heartbeat(&self, leases: Vec<Lease>, lease_until: i64) -> Result<usize> {
        let ids: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let client = self.conn().await?;
        let n = self
            .write_one_lazy(
                &client,
                "WITH hb AS (UPDATE runs r SET lease_until = $3 FROM unnest($1::text[], $2::int8[]) AS u(id, token) \
                 WHERE r.id = u.id AND r.lease_token = u.token AND r.status = 'running' RETURNING 1) \
                 SELECT count(*) FROM hb",
                &[&ids, &tokens, &lease_until],
            )
            .await?;
        let n: i64 = n.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// See [`crate::store::Store::runs_release`].
    pub async fn runs_release(&self, leases: Vec<Lease>, now: i64) -> Result<usize> {
        let ids: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let r = rows(
            &tx,
            "WITH rel AS ( \
               UPDATE runs r SET status = 'queued', attempt = r.attempt - 1, run_at = $3, lease_until = NULL, lease_token = NULL \
               FROM unnest($1::text[], $2::int8[]) AS u(id, token) \
               WHERE r.id = u.id AND r.lease_token = u.token AND r.status = 'running' \
               RETURNING r.id, r.attempt + 1 AS attempt, r.started_at), \
             a AS ( \
               INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
               SELECT id, attempt, 'released', started_at, $3, 'released at shutdown before it finished' FROM rel) \
             SELECT count(*) FROM rel",
            &[&ids, &tokens, &now],
        )
        .await?;
        let n: i64 = r.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
        tx.commit().await?;
        if n > 0 {
            self.wake();
        }
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// See [`crate::store::Store::runs_rescue`]. Safe with several nodes at once: the expired
    /// runs are taken with `FOR UPDATE SKIP LOCKED` and still `running` in the same statement.
    pub async fn runs_rescue(&self, now: i64) -> Result<usize> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let rescued = rows(
            &tx,
            "WITH lost AS ( \
               SELECT seq FROM runs WHERE status = 'running' AND lease_until < $1 \
               ORDER BY lease_until LIMIT 1000 FOR UPDATE SKIP LOCKED), \
             res AS ( \
               UPDATE runs r SET \
                 status = CASE WHEN r.attempt < r.max_attempts THEN 'queued' ELSE 'failed' END, \
                 finished_at = CASE WHEN r.attempt < r.max_attempts THEN NULL ELSE $1 END, \
                 run_at = $1, lease_until = NULL, lease_token = NULL, \
                 error = 'lease expired: the worker running attempt ' || r.attempt || ' stopped responding' \
               FROM lost WHERE r.seq = lost.seq AND r.status = 'running' \
               RETURNING r.id, r.attempt, r.started_at, r.error, r.status), \
             a AS ( \
               INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
               SELECT id, attempt, 'lost', started_at, $1, error FROM res) \
             SELECT status FROM res",
            &[&now],
        )
        .await?;
        let mut requeued = false;
        for r in &rescued {
            requeued |= r.try_get::<_, String>(0)? == "queued";
        }
        tx.commit().await?;
        if requeued {
            self.wake();
        }
        Ok(rescued.len())
    }

    /// See [`crate::store::Store::run_cancel`].
    pub async fn run_cancel(&self, id: String, now: i64) -> Result<()> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = exec(
            &tx,
            "UPDATE runs SET status = 'cancelled', finished_at = $2 WHERE id = $1 AND status = 'queued'",
            &[&id, &now],
        )
        .await?;
        if n == 1 {
            tx.commit().await?;
            return Ok(());
        }
        run_state_error(&tx, &id, "cancelled", "only a queued run can be cancelled").await
    }

    /// See [`crate::store::Store::run_retry`].
    pub async fn run_retry(&self, id: String, now: i64) -> Result<()> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = exec(
            &tx,
            "UPDATE runs SET status = 'queued', run_at = $2, finished_at = NULL, max_attempts = attempt + 1 \
             WHERE id = $1 AND status IN ('failed', 'cancelled')",
            &[&id, &now],
        )
        .await?;
        if n == 1 {
            tx.commit().await?;
            self.wake();
            return Ok(());
        }
        run_state_error(
            &tx,
            &id,
            "retried",
            "only a failed or cancelled run can be retried",
        )
        .await
    }
}

async fn run_state_error<C: GenericClient>(c: &C, id: &str, verb: &str, rule: &str) -> Result<()> {
    let r = rows(c, "SELECT status FROM runs WHERE id = $1", &[&id]).await?;
    match r.first() {
        None => Err(Error::NotFound {
            what: "run",
            id: id.to_string(),
        }),
        Some(r) => {
            let s: String = r.try_get(0)?;
            Err(Error::Conflict(format!(
                "run {id:?} cannot be {verb}: it is {s}; {rule}"
            )))
        }
    }
}
