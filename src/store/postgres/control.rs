//! An operator's actions on runs on PostgreSQL (the API's and the dashboard's): cancel (with the
//! run's unfinished invoked runs, `cancel.rs`), retry, and both in bulk, each in one transaction
//! that tells every process (`NOTIFY`) what it made due: a parent resumed, a run started by a
//! `flare/run.cancelled`, a retried run, whose job another process may run. Also the cancel of a
//! job's queued runs when it leaves its endpoint's index.

use deadpool_postgres::GenericClient;

use super::rows::{rows, triggers_refresh};
use super::PgStore;
use crate::store::{Error, Result, Triggers};

pub(super) async fn run_state_error<C: GenericClient>(
    c: &C,
    id: &str,
    verb: &str,
    rule: &str,
) -> Result<()> {
    let r = rows(c, "SELECT status FROM run_state WHERE id = $1", &[&id]).await?;
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

/// Cancels the queued runs (not the running ones) of job `job` with `error`, in the caller's
/// transaction, each as any cancel is (its `flare/run.cancelled` sent, a parent waiting for it
/// resumed); returns how many. Used when a job leaves its endpoint's index.
pub(super) async fn cancel_queued_of_job<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    job: &str,
    now: i64,
    error: &str,
) -> Result<u64> {
    let queued = rows(
        c,
        "SELECT r.id FROM run_queue q JOIN runs r ON r.seq = q.seq \
         WHERE q.job_id = $1 AND q.lease_until IS NULL ORDER BY r.id",
        &[&job],
    )
    .await?;
    let mut n = 0;
    for r in queued {
        let id: String = r.try_get(0)?;
        n += run_cancel_with(c, triggers, &id, now, Some(error)).await? as u64;
    }
    Ok(n)
}

/// Cancels run `id` if it is queued or running, inside `tx`, with its unfinished invoked runs
/// (see `cancel.rs`: its lease removed, so a late completion is refused), each with its
/// `flare/run.cancelled`. Returns 1 when it was cancelled, 0 when it was not queued or running.
pub(super) async fn run_cancel_in<C: GenericClient>(
    tx: &C,
    triggers: &Triggers,
    id: &str,
    now: i64,
) -> Result<usize> {
    run_cancel_with(tx, triggers, id, now, None).await
}

/// [`run_cancel_in`], the run's error set to `reason` when given.
pub(super) async fn run_cancel_with<C: GenericClient>(
    tx: &C,
    triggers: &Triggers,
    id: &str,
    now: i64,
    reason: Option<&str>,
) -> Result<usize> {
    let (n, ended) = super::cancel::cancelled(tx, id, now, reason, None).await?;
    super::writer::insert_follow_ups(tx, triggers, ended).await?;
    Ok(usize::from(n > 0))
}

/// Queues run `id` again if it is failed or cancelled, inside `tx` (see `run_retry`). Returns 1
/// when it was queued, 0 when it was in another state.
pub(super) async fn run_retry_in<C: GenericClient>(tx: &C, id: &str, now: i64) -> Result<usize> {
    Ok(rows(
        tx,
        "WITH old AS (SELECT seq, job_id, status, finished_at FROM runs \
             WHERE id = $1 AND status IN ('failed', 'cancelled') FOR UPDATE), \
           r AS (UPDATE runs SET status = 'queued', run_at = $2, finished_at = NULL, max_attempts = GREATEST(runs.max_attempts, runs.attempt + 1) \
             FROM old WHERE runs.seq = old.seq RETURNING runs.seq, runs.job_id, runs.attempt, runs.slot_a, runs.slot_b, runs.priority_ms), \
           q AS (INSERT INTO run_queue (seq, job_id, run_at, attempt, slot_a, slot_b, priority_ms) SELECT seq, job_id, $2, attempt, slot_a, slot_b, priority_ms FROM r), \
           f AS (UPDATE flow_slots f SET next_due = LEAST(f.next_due, $2) FROM r WHERE f.slot = r.slot_a), \
           o AS (UPDATE run_outcomes o SET n = o.n - 1 FROM old \
             WHERE o.minute = old.finished_at / 60000 AND o.job_id = old.job_id AND o.status = old.status) \
         SELECT 1 FROM r",
        &[&id, &now],
    )
    .await?
    .len())
}

impl PgStore {
    /// See [`crate::store::Store::run_cancel`].
    ///
    /// A cancel takes a lock per run down the tree of invoked runs; a completion batch ending
    /// some of them takes their parents' locks in its own order. When PostgreSQL resolves such a
    /// deadlock by rolling the cancel back, the cancel runs again.
    pub async fn run_cancel(&self, id: String, now: i64) -> Result<()> {
        super::writer::again_on_deadlock(|| self.run_cancel_once(&id, now)).await
    }

    /// One transaction of [`Self::run_cancel`].
    async fn run_cancel_once(&self, id: &str, now: i64) -> Result<()> {
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        // A parent waiting for it, or a run its `flare/run.cancelled` started, may be due now.
        let n = run_cancel_in(&tx, self.triggers(), id, now).await?;
        self.one_done(
            tx,
            n,
            id,
            "cancelled",
            "only a queued or running run can be cancelled",
        )
        .await
    }

    /// See [`crate::store::Store::run_retry`].
    pub async fn run_retry(&self, id: String, now: i64) -> Result<()> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        // The run no longer counts as failed or cancelled in its minute: the rates describe each
        // run's current outcome, as on SQLite.
        // Asked of any process (the dashboard's), run by those with the job.
        let n = run_retry_in(&tx, &id, now).await?;
        self.one_done(
            tx,
            n,
            &id,
            "retried",
            "only a failed or cancelled run can be retried",
        )
        .await
    }

    /// Ends an action on run `id` that changed `n` runs: when it did, every process is told at
    /// commit (what it made due may be another's job) and this one's workers are woken;
    /// otherwise the transaction is dropped and the run's state explains the refusal.
    async fn one_done(
        &self,
        tx: deadpool_postgres::Transaction<'_>,
        n: usize,
        id: &str,
        verb: &str,
        rule: &str,
    ) -> Result<()> {
        if n != 1 {
            return run_state_error(&tx, id, verb, rule).await;
        }
        super::flow::notify(&tx).await?;
        tx.commit().await?;
        self.wake();
        Ok(())
    }

    /// See [`crate::store::Store::runs_bulk`]. Run again when chosen as a deadlock's victim,
    /// as [`Self::run_cancel`].
    pub async fn runs_bulk(
        &self,
        action: crate::store::BulkRunAction,
        mut ids: Vec<String>,
        now: i64,
    ) -> Result<usize> {
        // One order for every bulk write, so two of them never wait for each other.
        ids.sort();
        super::writer::again_on_deadlock(|| self.runs_bulk_once(action, &ids, now)).await
    }

    /// One transaction of [`Self::runs_bulk`].
    async fn runs_bulk_once(
        &self,
        action: crate::store::BulkRunAction,
        ids: &[String],
        now: i64,
    ) -> Result<usize> {
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let mut n = 0;
        for id in ids {
            n += match action {
                crate::store::BulkRunAction::Cancel => {
                    run_cancel_in(&tx, self.triggers(), id, now).await?
                }
                crate::store::BulkRunAction::Retry => run_retry_in(&tx, id, now).await?,
            };
        }
        if n > 0 {
            // As `run_cancel` and `run_retry`: any process may run what this made due.
            super::flow::notify(&tx).await?;
        }
        tx.commit().await?;
        if n > 0 {
            self.wake();
        }
        Ok(n)
    }
}
