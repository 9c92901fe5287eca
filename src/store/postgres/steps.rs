//! Durable steps on PostgreSQL: recording one (one statement, fenced by the lease token on the
//! run's queue row) and reading a run's steps. Suspending runs on a wait is part of the
//! completion (`runs.rs`).

use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::rows::{json_text, rows, u32_of};
use super::PgStore;
use crate::model::{ms_to_time, Step, StepKind, StepStatus};
use crate::store::{Error, NewStep, Result};

/// Records a step while the run's queue row holds the lease token `$11`. The queue row is
/// locked `FOR SHARE`, so a rescue or completion of the run waits for this statement and one
/// that committed first is seen (the token then no longer matches): a worker that lost its
/// lease records nothing. A step that succeeded is final: not replaced.
pub(super) const STEP_RECORD_SQL: &str = "WITH held AS ( \
       SELECT r.id FROM run_queue q JOIN runs r ON r.seq = q.seq \
       WHERE r.id = $1 AND q.lease_token = $11 AND q.lease_until IS NOT NULL FOR SHARE OF q), \
     ins AS ( \
       INSERT INTO run_steps (run_id, key, kind, status, attempt, started_at, finished_at, wait_until, output, error, label) \
       SELECT id, $2::text, $3::text, $4::text, $5::int4, $6::int8, $7::int8, $8::int8, $9::text, $10::text, $12::text FROM held \
       ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, \
         attempt = excluded.attempt, started_at = excluded.started_at, finished_at = excluded.finished_at, \
         wait_until = excluded.wait_until, output = excluded.output, error = excluded.error, \
         label = coalesce(excluded.label, run_steps.label) \
       WHERE run_steps.status <> 'succeeded') \
     SELECT count(*) FROM held";

/// A run's steps, in the order they started.
pub(super) async fn steps_of<C: GenericClient>(c: &C, run_id: &str) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    for r in rows(
        c,
        "SELECT key, kind, status, attempt, started_at, finished_at, wait_until, output, error, label \
         FROM run_steps WHERE run_id = $1 ORDER BY started_at, key",
        &[&run_id],
    )
    .await?
    {
        let kind: String = r.try_get(1)?;
        let status: String = r.try_get(2)?;
        let started_at: i64 = r.try_get(4)?;
        let finished_at: Option<i64> = r.try_get(5)?;
        let output: Option<String> = r.try_get(7)?;
        steps.push(Step {
            key: r.try_get(0)?,
            kind: StepKind::parse(&kind)
                .ok_or_else(|| Error::Corrupt(format!("unknown step kind {kind:?}")))?,
            status: StepStatus::parse(&status)
                .ok_or_else(|| Error::Corrupt(format!("unknown step status {status:?}")))?,
            attempt: u32_of(&r, 3)?,
            started_at: ms_to_time(started_at),
            finished_at: finished_at.map(ms_to_time),
            duration_ms: finished_at.map(|f| f - started_at),
            wait_until: r.try_get::<_, Option<i64>>(6)?.map(ms_to_time),
            output: output.as_deref().map(json_text).transpose()?,
            error: r.try_get(8)?,
            label: r.try_get(9)?,
        });
    }
    Ok(steps)
}

impl PgStore {
    /// See [`crate::store::Store::step_record`]: one statement.
    pub async fn step_record(&self, step: NewStep) -> Result<bool> {
        let output = step.output.as_ref().map(Value::to_string);
        let attempt = i32::try_from(step.attempt).unwrap_or(i32::MAX);
        let client = self.conn().await?;
        let r = self
            .write_one(
                &client,
                STEP_RECORD_SQL,
                &[
                    &step.lease.run_id,
                    &step.key,
                    &step.kind.as_str(),
                    &step.status.as_str(),
                    &attempt,
                    &step.started_at,
                    &step.finished_at,
                    &step.wait_until,
                    &output,
                    &step.error,
                    &step.lease.token,
                    &step.label,
                ],
            )
            .await?;
        let held: i64 = r.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
        Ok(held > 0)
    }

    /// See [`crate::store::Store::run_steps`].
    pub async fn run_steps(&self, run_id: String) -> Result<Vec<Step>> {
        let client = self.conn().await?;
        steps_of(&client, &run_id).await
    }
}
