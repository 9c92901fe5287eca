//! The run lifecycle on PostgreSQL: claim, complete (a wait's suspension included), heartbeat,
//! release, rescue and expiry, and the reads of one run (its detail, the next due time, counts
//! by state); an operator's cancel and retry are in `control.rs`. Each is one statement in its own transaction, fenced by the lease token where a worker
//! writes, so a worker that lost its lease never overwrites the one that took over.
//!
//! A run's state is in two places kept in step by every statement here: its row in `runs` (the
//! history: status, attempt, times, outcome), written when it is created and when an attempt
//! ends, and, while it is queued or running, its row in `run_queue`: due time and, during an
//! attempt, the lease (expiry and the token that fences writes), the attempt number, start time
//! and node. A claim writes the queue row alone; readers see a leased run as running through the
//! view `run_state` (see `0005_lease_on_queue.sql`). Finished runs are also counted in
//! `run_outcomes` (see `0004_run_queue.sql`).
//!
//! Every writer locks a run's queue row before its run row, so two statements never wait for
//! each other in opposite orders.

use std::collections::HashSet;

use deadpool_postgres::GenericClient;

use super::rows::{
    exec, json_text, opt_json, rows, run_from_row, triggers_refresh, u32_of, LogColumns,
    RUN_COLUMNS,
};
use super::writer::send_ended;
use super::{PgStore, GENERIC_PLAN_NO_WAIT};
use crate::model::{ms_to_time, Attempt, Level, LogLine};
use crate::store::{
    ClaimParams, ClaimedRun, Completion, Finish, FlowGroup, Lease, Result, RunDetail,
};

/// The claim of one group: runnable runs of the jobs `$4`, lowest rank first (the due time, less
/// a priority's offset: `0025_flow_priority.sql`), at most `$5`, taken with `FOR UPDATE SKIP
/// LOCKED` so concurrent claimers never wait for nor share a run. The inner selects walk the
/// partial indexes of runnable queue rows, without a priority in due order and with one in rank
/// order, each stopping at the limit, and the lowest ranks of the two are taken; the lease,
/// token, attempt and node are set on those queue rows, the only rows written: the run and its
/// event are read for what the worker needs, each by its key (`LATERAL … OFFSET 0`: a generic
/// plan made while the tables were small hashed the batch and read all of `runs` for it,
/// 82,000 rows per claim of 257 in `auto_explain`). Paused jobs are taken off the list of jobs
/// (once per claim), so their runs stay queued.
pub(super) const CLAIM_SQL: &str =
    "WITH jobs_on AS (SELECT unnest($4::text[]) EXCEPT SELECT id FROM jobs WHERE paused), \
     q AS ( \
       UPDATE run_queue q SET lease_until = $2, lease_token = $3, attempt = q.attempt + 1, \
         started_at = $1, node = $6 \
       WHERE q.seq = ANY(ARRAY(SELECT c.seq FROM ( \
         SELECT * FROM (SELECT seq, run_at AS rank FROM run_queue \
           WHERE lease_until IS NULL AND slot_a IS NULL AND priority_ms IS NULL AND run_at <= $1 \
           AND (expires_at IS NULL OR expires_at > $1 OR started_at IS NOT NULL) \
           AND job_id = ANY(ARRAY(SELECT * FROM jobs_on)) \
           ORDER BY run_at, seq LIMIT $5 FOR UPDATE SKIP LOCKED) plain \
         UNION ALL \
         SELECT * FROM (SELECT seq, run_at - priority_ms AS rank FROM run_queue \
           WHERE lease_until IS NULL AND slot_a IS NULL AND priority_ms IS NOT NULL \
           AND run_at - priority_ms <= $1 + 600000 AND run_at <= $1 \
           AND (expires_at IS NULL OR expires_at > $1 OR started_at IS NOT NULL) \
           AND job_id = ANY(ARRAY(SELECT * FROM jobs_on)) \
           ORDER BY run_at - priority_ms, seq LIMIT $5 FOR UPDATE SKIP LOCKED) ranked \
         ) c ORDER BY c.rank, c.seq LIMIT $5)) \
       RETURNING q.seq, q.attempt) \
     SELECT r.id, r.event_id, e.name, r.job_id, q.attempt, r.max_attempts, e.payload \
     FROM q, LATERAL (SELECT * FROM runs WHERE seq = q.seq OFFSET 0) r, \
       LATERAL (SELECT name, payload FROM events WHERE id = r.event_id OFFSET 0) e";

/// The `SET LOCAL`s of a statement that takes the oldest due rows from a partial index (the
/// claim, `next_due`): the prepared statement's generic plan (see [`PgStore::with_settings`]) and
/// `enable_sort = off`, which leaves the planner one way to produce the oldest due rows: walk the
/// index (`run_queue_due`, `events_due`) in order and stop at the batch. With the queue's
/// statistics stale (analysed while it was nearly empty, then a burst of work queued) its
/// estimate was a few rows, and the plan it preferred read and sorted the whole queue to take the
/// first 500: 50 ms per claim against 6 ms with 100,000 runs queued, on every connection of every
/// worker until autovacuum analysed the table.
macro_rules! walk_due {
    () => {
        "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_sort = off"
    };
}

/// See [`walk_due`].
pub(super) const WALK_DUE: &str = walk_due!();

/// The transaction settings of a claim: [`walk_due`], and `synchronous_commit = off`: the loss
/// of a claim in a server crash costs nothing but a re-run. If the server crashes before the
/// flush, the run is simply still queued: the rescuer and the fencing token keep at-least-once,
/// and an attempt that was never recorded did not count.
pub(super) const CLAIM_SETTINGS: &str =
    concat!(walk_due!(), "; SET LOCAL synchronous_commit = off");

/// The queue rows of `$from` (with `id, token`) whose lease is still held by that token:
/// `run_queue q` joined to `runs r`, for the `FROM`/`USING` and `WHERE` of a fenced write. Each
/// run is read by its id (`LATERAL … OFFSET 0`), whatever the generic plan thinks of the size of
/// `runs` (see [`CLAIM_SQL`]).
macro_rules! held_sql {
    ($from:literal) => {
        concat!(
            $from,
            ", LATERAL (SELECT seq, id FROM runs WHERE id = u.id OFFSET 0) r \
             WHERE q.seq = r.seq AND q.lease_token = u.token AND q.lease_until IS NOT NULL"
        )
    };
}

/// Adds finished runs (the rows of `$from`, with `finished_at, job_id, status`) to
/// `run_outcomes`, in key order so that concurrent writers lock the counters in one order.
macro_rules! tally_sql {
    ($from:literal) => {
        concat!(
            "INSERT INTO run_outcomes (minute, job_id, status, n) \
             SELECT finished_at / 60000, job_id, status, count(*) FROM ",
            $from,
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 \
             ON CONFLICT (minute, job_id, status) DO UPDATE SET n = run_outcomes.n + excluded.n"
        )
    };
}

/// The error of a run cancelled because it did not start within its job's start timeout.
const EXPIRED: &str = "expired before it started";

/// The settings of a completion: the generic plan, and the shared lock of the invoked runs'
/// name, so a parent registering its wait for one of these runs (exclusive) is ordered with it
/// (see `waits.rs`).
const COMPLETE_SETTINGS: &str = "SET LOCAL plan_cache_mode = force_generic_plan; \
     SELECT pg_advisory_xact_lock_shared(27, hashtext('flare/job.invoked'))";

/// Records a batch of finished attempts in one statement: each run is written only while its
/// queue row still holds the lease token it was claimed with (fencing); run rows, attempts, logs
/// and outcome counts are written for those alone. A success's attempt is the run row itself
/// (see [`crate::store::RunDetail::new`]): no attempt row. A finished run leaves the queue; a
/// retried one goes back to it, due at `run_at`.
/// Fan-in: one probe per ended run for its wait (`inv_w`, materialized); a parent is due when its
/// waits left are the ones deleted here, counted up to one more (not all: quadratic in batches).
pub(super) const COMPLETE_SQL: &str = concat!(
    "WITH u AS ( \
       SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::text[], \
                            $7::text[], $8::int4[], $9::int8[]) \
         WITH ORDINALITY AS u(id, token, status, run_at, finished_at, output, error, attempt, started_at, ord)), \
     dequeued AS (DELETE FROM run_queue q USING ",
    held_sql!("u"),
    " AND u.status <> 'queued' RETURNING q.seq, u.id, q.attempt, q.started_at, q.node, u.ord), \
     requeued AS (UPDATE run_queue q SET lease_until = NULL, lease_token = NULL, run_at = u.run_at \
       FROM ",
    held_sql!("u"),
    " AND u.status = 'queued' RETURNING q.seq, u.id, q.attempt, q.started_at, q.node, u.ord), \
     done AS ( \
       UPDATE runs r SET status = u.status, attempt = q.attempt, started_at = q.started_at, node = q.node, \
         run_at = CASE WHEN u.status = 'queued' THEN u.run_at ELSE r.run_at END, \
         finished_at = CASE WHEN u.status = 'queued' THEN r.finished_at ELSE u.finished_at END, \
         output = CASE WHEN u.status = 'succeeded' THEN u.output ELSE r.output END, \
         error = u.error \
       FROM (SELECT * FROM dequeued UNION ALL SELECT * FROM requeued) q JOIN u ON u.ord = q.ord \
       WHERE r.seq = q.seq \
       RETURNING r.id, r.job_id, r.status, r.finished_at, r.output, r.error, r.slot_a, q.ord), \
     inv_w AS MATERIALIZED (SELECT d.*, (SELECT ARRAY[w.run_id, w.step_key] FROM run_waits w \
         WHERE w.event_name = 'flare/job.invoked' AND w.match_path = 'run' AND w.match_value = d.id LIMIT 1) AS w \
       FROM done d WHERE d.status IN ('succeeded', 'failed') AND EXISTS (SELECT 1 FROM run_waits \
         WHERE event_name = 'flare/job.invoked' AND match_path = 'run')), \
     inv AS (DELETE FROM run_waits w USING inv_w x WHERE w.run_id = x.w[1] AND w.step_key = x.w[2] \
       RETURNING w.run_id AS parent, w.step_key, x.finished_at AS at, x.status = 'succeeded' AS ok, \
         'run ' || x.id || ' failed: ' || coalesce(x.error, 'no error given') AS err, \
         json_build_object('runId', x.id, 'status', x.status, 'output', x.output::json, 'error', x.error)::text AS out), \
     inv_steps AS (UPDATE run_steps s SET status = CASE WHEN inv.ok THEN 'succeeded' ELSE 'failed' END, \
         finished_at = inv.at, output = inv.out, error = CASE WHEN inv.ok THEN NULL ELSE inv.err END \
       FROM inv WHERE s.run_id = inv.parent AND s.key = inv.step_key AND s.status <> 'succeeded'), \
     inv_parents AS (SELECT parent, max(at) AS at, count(*) AS ended FROM inv GROUP BY parent), \
     inv_queue AS (UPDATE run_queue q SET run_at = p.at FROM runs pr, inv_parents p \
       WHERE pr.id = p.parent AND q.seq = pr.seq AND q.lease_until IS NULL AND p.ended = \
         (SELECT count(*) FROM (SELECT FROM run_waits w WHERE w.run_id = p.parent AND w.event_name = 'flare/job.invoked' LIMIT p.ended + 1) l) \
       RETURNING q.seq, q.run_at), \
     inv_runs AS (UPDATE runs x SET run_at = inv_queue.run_at FROM inv_queue WHERE x.seq = inv_queue.seq), \
     disarmed AS (DELETE FROM run_cancel_keys k USING done WHERE k.run_id = done.id AND done.status <> 'queued' \
       AND EXISTS (SELECT 1 FROM run_cancel_keys)), \
     tally AS (",
    tally_sql!("done WHERE status <> 'queued'"),
    "), \
     attempts AS ( \
       INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
       SELECT u.id, u.attempt, CASE WHEN u.status = 'queued' THEN 'retrying' ELSE u.status END, \
              u.started_at, u.finished_at, u.error \
       FROM u WHERE u.status <> 'succeeded' AND u.ord IN (SELECT ord FROM done) ORDER BY u.ord), \
     logs AS ( \
       INSERT INTO run_logs (run_id, attempt, level, message, fields, at) \
       SELECT l.run_id, l.attempt, l.level, l.message, l.fields, l.at \
       FROM unnest($10::text[], $11::int4[], $12::text[], $13::text[], $14::text[], $15::int8[]) \
            WITH ORDINALITY AS l(run_id, attempt, level, message, fields, at, ord) \
       WHERE (l.run_id, l.attempt) IN (SELECT u.id, u.attempt FROM done JOIN u ON u.ord = done.ord) ORDER BY l.ord) \
     SELECT ord, slot_a IS NOT NULL, EXISTS (SELECT 1 FROM inv_queue) FROM done"
);

impl PgStore {
    /// See [`crate::store::Store::runs_claim`].
    pub async fn runs_claim(&self, p: ClaimParams) -> Result<Vec<ClaimedRun>> {
        let token: i64 = rand::random::<i64>() & i64::MAX;
        let groups: Vec<(&[String], usize, Option<&FlowGroup>)> = p
            .groups
            .iter()
            .filter(|g| g.limit > 0 && !g.jobs.is_empty())
            .map(|g| (g.jobs.as_slice(), g.limit, g.flow.as_ref()))
            .collect();
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        // Each group's claim is its own transaction: nothing stays open.
        let client = self.conn().await?;
        let mut claimed = Vec::new();
        let mut left = groups.iter().map(|g| g.1).max().unwrap_or(0);
        for (jobs, limit, flow) in groups {
            let limit = i64::try_from(limit.min(left)).unwrap_or(i64::MAX);
            if limit <= 0 {
                break;
            }
            let taken = match flow {
                Some(flow) => {
                    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
                    super::flow::claim(
                        self,
                        &client,
                        CLAIM_SETTINGS,
                        &[
                            &jobs[0],
                            &flow.second_slot,
                            &p.now,
                            &p.lease_until,
                            &token,
                            &p.node,
                            &limit,
                        ],
                    )
                    .await
                }
                None => {
                    self.with_settings(
                        &client,
                        CLAIM_SETTINGS,
                        CLAIM_SQL,
                        &[&p.now, &p.lease_until, &token, &jobs, &limit, &p.node],
                    )
                    .await
                }
            };
            // A failed group after others claimed: those runs still go to the worker.
            let Some(taken) = super::flow::unless_claimed(taken, !claimed.is_empty())? else {
                break;
            };
            left = left.saturating_sub(taken.len());
            for r in taken {
                claimed.push(ClaimedRun {
                    id: r.try_get(0)?,
                    event_id: r.try_get(1)?,
                    event_name: r.try_get(2)?,
                    job_id: r.try_get(3)?,
                    attempt: u32_of(&r, 4)?,
                    max_attempts: u32_of(&r, 5)?,
                    token,
                    payload: json_text(&r.try_get::<_, String>(6)?)?,
                    started_at: p.now,
                });
            }
        }
        Ok(claimed)
    }

    /// See [`crate::store::Store::runs_complete`]: the whole batch in one statement.
    pub async fn runs_complete(&self, completions: Vec<Completion>) -> Result<Vec<bool>> {
        // Suspensions on a wait (rare) have a statement of their own, so the hot one stays as it is.
        let (waits, ends): (Vec<&Completion>, Vec<&Completion>) = completions
            .iter()
            .partition(|c| matches!(c.finish, Finish::Wait { .. }));
        // Waits for events share one transaction (it takes their event names' locks).
        let (on_event, waits): (Vec<&Completion>, Vec<&Completion>) = waits
            .into_iter()
            .partition(|c| matches!(c.finish, Finish::Wait { event: Some(_), .. }));
        let mut suspended = if waits.is_empty() {
            HashSet::new()
        } else {
            self.runs_suspend(&waits).await?
        };
        if !on_event.is_empty() {
            suspended.extend(self.runs_suspend_on_events(&on_event).await?);
        }
        // Ended attempts by id and token: two attempts of one run may end in one batch.
        let ended = if ends.is_empty() {
            HashSet::new()
        } else {
            self.runs_end(&ends).await?
        };
        Ok(completions
            .iter()
            .map(|c| match c.finish {
                Finish::Wait { .. } => suspended.contains(&c.run_id),
                _ => ended.contains(&(c.run_id.clone(), c.token)),
            })
            .collect())
    }

    /// Records finished attempts (and retries) in one statement; returns the attempts (run id
    /// and token) whose lease was still held.
    async fn runs_end(&self, completions: &[&Completion]) -> Result<HashSet<(String, i64)>> {
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
        let mut logs = LogColumns::default();
        let mut retry = false;
        let (mut freed, mut resumed) = (false, false);
        for c in completions {
            let (status, due, output, error) = match &c.finish {
                Finish::Succeeded(output) => ("succeeded", None, Some(output.to_string()), None),
                Finish::Retry { error, at } => {
                    retry = true;
                    ("queued", Some(*at), None, Some(error.as_str()))
                }
                Finish::Failed(error) => ("failed", None, None, Some(error.as_str())),
                // Suspensions go to `runs_suspend`.
                Finish::Wait { .. } => continue,
            };
            statuses.push(status);
            run_at.push(due);
            outputs.push(output);
            errors.push(error);
            ids.push(c.run_id.as_str());
            tokens.push(c.token);
            finished.push(c.finished_at);
            attempts.push(i32::try_from(c.attempt).unwrap_or(i32::MAX));
            started.push(c.started_at);
            logs.add(&c.run_id, &c.logs);
        }
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 15] = [
            &ids,
            &tokens,
            &statuses,
            &run_at,
            &finished,
            &outputs,
            &errors,
            &attempts,
            &started,
            &logs.run,
            &logs.attempt,
            &logs.level,
            &logs.message,
            &logs.fields,
            &logs.at,
        ];
        let failed: Vec<(String, i64, Option<String>)> = completions
            .iter()
            .filter_map(|c| match &c.finish {
                Finish::Failed(error) => Some((c.run_id.clone(), c.token, Some(error.clone()))),
                _ => None,
            })
            .collect();
        let mut client = self.conn().await?;
        if failed.is_empty() {
            // The hot path: one round trip (the parents' locks taken first: `children.rs`).
            let written = self
                .with_settings_after(
                    &client,
                    COMPLETE_SETTINGS,
                    (super::waits::LOCK_PARENTS_SQL, &[&ids]),
                    COMPLETE_SQL,
                    &params,
                )
                .await?;
            let held =
                super::rows::held_attempts(&written, &ids, &tokens, &mut freed, &mut resumed)?;
            self.after_end(&client, retry, freed || resumed).await?;
            return Ok(held);
        }
        // A run failed for good: its `flare/run.failed` commits with it.
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        exec(&tx, super::waits::LOCK_INVOKE_SHARED_SQL, &[]).await?;
        super::waits::lock_parents(&tx, &ids).await?;
        let written = rows(&tx, COMPLETE_SQL, &params).await?;
        let held = super::rows::held_attempts(&written, &ids, &tokens, &mut freed, &mut resumed)?;
        let ended: Vec<(String, Option<String>)> = failed
            .into_iter()
            .filter(|(id, token, _)| held.contains(&(id.clone(), *token)))
            .map(|(id, _, error)| (id, error))
            .collect();
        let now = completions.iter().map(|c| c.finished_at).max().unwrap_or(0);
        let woken = send_ended(&tx, self.triggers(), &ended, false, now).await?;
        tx.commit().await?;
        self.after_end(&client, retry || woken, freed || resumed)
            .await?;
        Ok(held)
    }

    /// Wakes this process's workers (runs due, slots freed), and every process's (`NOTIFY`) when
    /// `all`: slots freed, which any process's runs may take, or a parent made due by its last
    /// child, whose job another process may run.
    async fn after_end<C: GenericClient>(&self, client: &C, wake: bool, all: bool) -> Result<()> {
        if wake || all {
            self.wake();
        }
        if all {
            super::flow::notify(client).await?;
        }
        Ok(())
    }

    /// See [`crate::store::Store::runs_heartbeat`].
    pub async fn runs_heartbeat(
        &self,
        leases: Vec<Lease>,
        lease_until: i64,
    ) -> Result<Vec<String>> {
        let ids: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let client = self.conn().await?;
        let n = self
            .with_settings(
                &client,
                GENERIC_PLAN_NO_WAIT,
                concat!(
                    "WITH hb AS (UPDATE run_queue q SET lease_until = $3 \
                     FROM ",
                    held_sql!("unnest($1::text[], $2::int8[]) AS u(id, token)"),
                    " RETURNING r.id) \
                     SELECT x FROM unnest($1::text[]) AS x WHERE x <> ALL(ARRAY(SELECT id FROM hb))"
                ),
                &[&ids, &tokens, &lease_until],
            )
            .await?;
        // The runs whose lease is no longer held (cancelled, or rescued after it expired).
        n.iter()
            .map(|r| r.try_get::<_, String>(0).map_err(Into::into))
            .collect()
    }

    /// See [`crate::store::Store::runs_release`].
    pub async fn runs_release(&self, leases: Vec<Lease>, now: i64) -> Result<usize> {
        let ids: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let r = rows(
            &tx,
            concat!(
                "WITH rel AS ( \
                   UPDATE run_queue q SET lease_until = NULL, lease_token = NULL, attempt = q.attempt - 1, run_at = $3 \
                   FROM ",
                held_sql!("unnest($1::text[], $2::int8[]) AS u(id, token)"),
                " RETURNING r.id, q.seq, q.attempt + 1 AS attempt, q.started_at), \
                 hist AS (UPDATE runs r SET run_at = $3 FROM rel WHERE r.seq = rel.seq), \
                 a AS ( \
                   INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
                   SELECT id, attempt, 'released', started_at, $3, 'released at shutdown before it finished' FROM rel) \
                 SELECT count(*) FROM rel"
            ),
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

    /// See [`crate::store::Store::runs_rescue`]. Safe with several nodes at once: the queue rows
    /// of expired leases are taken with `FOR UPDATE SKIP LOCKED`, which checks the lease again on
    /// the row as it is when locked, so a lease renewed meanwhile is left alone and a run whose
    /// queue row a late completion holds is skipped instead of waited for. Its attempt is
    /// recorded as lost; it is queued again or, out of attempts, failed.
    pub async fn runs_rescue(&self, now: i64) -> Result<usize> {
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let rescued = rows(
            &tx,
            concat!(
            "WITH lost AS ( \
               SELECT q.seq, q.attempt, q.started_at, q.node, q.attempt < r.max_attempts AS again \
               FROM run_queue q JOIN runs r ON r.seq = q.seq \
               WHERE q.lease_until < $1 ORDER BY q.lease_until LIMIT 1000 FOR UPDATE OF q SKIP LOCKED), \
             requeued AS (UPDATE run_queue q SET lease_until = NULL, lease_token = NULL, run_at = $1 \
               FROM lost WHERE q.seq = lost.seq AND lost.again), \
             dequeued AS (DELETE FROM run_queue q USING lost WHERE q.seq = lost.seq AND NOT lost.again), \
             res AS ( \
               UPDATE runs r SET \
                 status = CASE WHEN lost.again THEN 'queued' ELSE 'failed' END, \
                 finished_at = CASE WHEN lost.again THEN NULL ELSE $1 END, \
                 attempt = lost.attempt, started_at = lost.started_at, node = lost.node, run_at = $1, \
                 error = 'lease expired: the worker running attempt ' || lost.attempt || ' stopped responding' \
               FROM lost WHERE r.seq = lost.seq \
               RETURNING r.id, r.job_id, r.attempt, r.started_at, r.finished_at, r.error, r.status), \
             disarmed AS (DELETE FROM run_cancel_keys k USING res WHERE k.run_id = res.id AND res.status = 'failed'), \
             tally AS (",
            tally_sql!("res WHERE status = 'failed'"),
            "), \
             a AS ( \
               INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
               SELECT id, attempt, 'lost', started_at, $1, error FROM res) \
             SELECT status, id, error FROM res"
            ),
            &[&now],
        )
        .await?;
        let mut requeued = false;
        let mut failed = Vec::new();
        for r in &rescued {
            let status: String = r.try_get(0)?;
            requeued |= status == "queued";
            if status == "failed" {
                failed.push((r.try_get(1)?, r.try_get(2)?));
            }
        }
        requeued |= send_ended(&tx, self.triggers(), &failed, false, now).await?;
        // A parent waiting for a run that failed here resumes (`children.rs`).
        for (id, _) in &failed {
            requeued |= super::waits::on_run_end(&tx, id, now).await? > 0;
        }
        tx.commit().await?;
        if requeued {
            self.wake();
        }
        Ok(rescued.len())
    }

    /// See [`crate::store::Store::runs_expire`]: each expired run is cancelled as any cancel is
    /// (its `flare/run.cancelled` sent, a parent waiting for it resumed), in one transaction.
    pub async fn runs_expire(&self, now: i64) -> Result<usize> {
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let expired = rows(
            &tx,
            "SELECT r.id FROM run_queue q JOIN runs r ON r.seq = q.seq \
             WHERE q.seq IN (SELECT seq FROM run_queue \
               WHERE expires_at <= $1 AND lease_until IS NULL AND started_at IS NULL \
               ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED)",
            &[&now],
        )
        .await?;
        let mut n = 0;
        for r in &expired {
            let id: String = r.try_get(0)?;
            n += super::control::run_cancel_with(&tx, self.triggers(), &id, now, Some(EXPIRED))
                .await?;
        }
        tx.commit().await?;
        if n > 0 {
            self.wake();
        }
        Ok(n)
    }

    /// See [`crate::store::Store::runs_next_due`]: both lookups walk a partial index in due order.
    pub async fn runs_next_due(&self, jobs: Vec<String>) -> Result<Option<i64>> {
        let conn = self.conn().await?;
        let r = self
            .with_settings(
                &conn,
                super::runs::WALK_DUE,
                "SELECT LEAST((SELECT run_at FROM run_queue WHERE lease_until IS NULL AND slot_a IS NULL \
                         AND priority_ms IS NULL AND job_id = ANY(ARRAY(SELECT unnest($1::text[]) EXCEPT SELECT id FROM jobs WHERE paused)) \
                         ORDER BY run_at LIMIT 1), (SELECT run_at FROM run_queue WHERE lease_until IS NULL AND slot_a IS NULL \
                         AND priority_ms IS NOT NULL AND job_id = ANY(ARRAY(SELECT unnest($1::text[]) EXCEPT SELECT id FROM jobs WHERE paused)) \
                         ORDER BY run_at LIMIT 1)), \
                        (SELECT deliver_at FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL \
                         AND deliver_at IS NOT NULL ORDER BY deliver_at LIMIT 1), \
                        (SELECT min(next_due) FROM flow_slots WHERE job_id = ANY($1::text[]) \
                         AND next_due IS NOT NULL AND running < cap)",
                &[&jobs],
            )
            .await?;
        let Some(r) = r.first() else {
            return Ok(None);
        };
        let times: [Option<i64>; 3] = [r.try_get(0)?, r.try_get(1)?, r.try_get(2)?];
        Ok(times.into_iter().flatten().min())
    }

    /// See [`crate::store::Store::run_detail`].
    pub async fn run_detail(&self, id: String) -> Result<Option<RunDetail>> {
        let mut conn = self.conn().await?;
        // One snapshot for all its reads: read one by one under READ COMMITTED, a run whose
        // suspension committed between them showed `running` with its wait and waiting step.
        let tx = conn
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let c = &tx;
        let Some(run) = rows(
            c,
            &format!("SELECT {RUN_COLUMNS} FROM run_state runs WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(run_from_row)
        .transpose()?
        else {
            return Ok(None);
        };
        let mut logs = Vec::new();
        for r in rows(
            c,
            "SELECT attempt, level, message, fields, at FROM run_logs WHERE run_id = $1 ORDER BY seq",
            &[&id],
        )
        .await?
        {
            let level: String = r.try_get(1)?;
            logs.push(LogLine {
                attempt: u32_of(&r, 0)?,
                level: Level::parse(&level).unwrap_or(Level::Info),
                message: r.try_get(2)?,
                fields: opt_json(r.try_get(3)?)?,
                at: ms_to_time(r.try_get(4)?),
            });
        }
        let mut attempts = Vec::new();
        for r in rows(
            c,
            "SELECT attempt, outcome, started_at, finished_at, error FROM run_attempts \
             WHERE run_id = $1 ORDER BY seq",
            &[&id],
        )
        .await?
        {
            attempts.push(Attempt {
                attempt: u32_of(&r, 0)?,
                outcome: r.try_get(1)?,
                started_at: r.try_get::<_, Option<i64>>(2)?.map(ms_to_time),
                finished_at: ms_to_time(r.try_get(3)?),
                error: r.try_get(4)?,
            });
        }
        let steps = super::steps::steps_of(c, &id).await?;
        let wait = super::waits::pending(c, &id).await?;
        let mut detail = RunDetail::new(run, logs, attempts, steps).with_wait(wait);
        detail.waiting_for = crate::store::runs::held_by(
            super::flow::waiting_for(c, &detail.run).await?,
            super::debounce::waiting_for(c, &detail.run).await?,
        );
        super::links::run_links(c, &mut detail).await?;
        tx.commit().await?;
        Ok(Some(detail))
    }
}
