//! Durable steps on PostgreSQL: recording one (one statement, fenced by the lease token on the
//! run's queue row), reading a run's steps, suspending runs on their waits (a completion that
//! `runs.rs` hands here; a wait for an event in a transaction of its own, see `waits.rs`) and
//! ending a wait for an event at its timeout.

use std::collections::HashSet;

use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::rows::{json_text, rows, u32_of, LogColumns};
use super::{PgStore, GENERIC_PLAN};
use crate::model::{ms_to_time, Invoked, Step, StepKind, StepStatus, StepsByKey};
use crate::store::{Completion, Error, Finish, Lease, NewStep, Result};

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

/// The columns of a step as read ([`step_of`]), followed by the `WHERE`.
macro_rules! step_select {
    () => {
        "SELECT key, kind, status, attempt, started_at, finished_at, wait_until, output, error, \
           label FROM run_steps"
    };
}

/// A run's steps, in the order they started, as stored and shown.
pub(super) async fn steps_of<C: GenericClient>(c: &C, run_id: &str) -> Result<Vec<Step>> {
    let sql = concat!(
        step_select!(),
        " WHERE run_id = $1 ORDER BY started_at, key"
    );
    rows(c, sql, &[&run_id])
        .await?
        .iter()
        .map(|r| step_of(r, false))
        .collect()
}

/// A run's steps by key, unsorted, each ended child's outcome typed ([`Step::outcome`]): what
/// an execution replays from (a fan-in's parent reads thousands).
pub(super) async fn steps_by_key<C: GenericClient>(c: &C, run_id: &str) -> Result<StepsByKey> {
    let rows = rows(c, concat!(step_select!(), " WHERE run_id = $1"), &[&run_id]).await?;
    let mut steps = StepsByKey::with_capacity_and_hasher(rows.len(), Default::default());
    for r in &rows {
        let step = step_of(r, true)?;
        steps.insert(step.key.clone(), step);
    }
    Ok(steps)
}

/// A row of [`step_select`]; with `typed`, an ended invoke step's outcome is read into
/// [`Step::outcome`] instead of `output`.
fn step_of(r: &tokio_postgres::Row, typed: bool) -> Result<Step> {
    let kind: &str = r.try_get(1)?;
    let kind = StepKind::parse(kind)
        .ok_or_else(|| Error::Corrupt(format!("unknown step kind {kind:?}")))?;
    let status: &str = r.try_get(2)?;
    let status = StepStatus::parse(status)
        .ok_or_else(|| Error::Corrupt(format!("unknown step status {status:?}")))?;
    let started_at: i64 = r.try_get(4)?;
    let finished_at: Option<i64> = r.try_get(5)?;
    let text: Option<&str> = r.try_get(7)?;
    let outcome = match text {
        Some(text) if typed && kind == StepKind::Invoke && status != StepStatus::Waiting => {
            Invoked::from_json_text(text)
        }
        _ => None,
    };
    let output = match (&outcome, text) {
        (None, Some(text)) => Some(json_text(text)?),
        _ => None,
    };
    Ok(Step {
        key: r.try_get(0)?,
        kind,
        status,
        attempt: u32_of(r, 3)?,
        started_at: ms_to_time(started_at),
        finished_at: finished_at.map(ms_to_time),
        duration_ms: finished_at.map(|f| f - started_at),
        wait_until: r.try_get::<_, Option<i64>>(6)?.map(ms_to_time),
        output,
        error: r.try_get(8)?,
        label: r.try_get(9)?,
        outcome,
    })
}

/// Suspends a batch of runs on their waits: each queue row still holding the attempt's token
/// goes back to runnable, due at the wait's time, with the attempt uncounted (as a release at
/// shutdown); the run row follows; the wait step, the attempt (`waiting`) and the log lines are
/// written for those alone. The queue row is locked before the run row, as everywhere.
pub(super) const SUSPEND_SQL: &str = "WITH u AS ( \
       SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::int8[], $13::text[]) \
         AS u(id, token, key, until, since, finished_at, kind)), \
     waiting AS ( \
       UPDATE run_queue q SET lease_until = NULL, lease_token = NULL, run_at = u.until, attempt = q.attempt - 1 \
       FROM runs r, u WHERE r.id = u.id AND q.seq = r.seq AND q.lease_token = u.token AND q.lease_until IS NOT NULL \
       RETURNING q.seq, u.id, q.attempt + 1 AS attempt, q.started_at, q.node, u.key, u.until, u.since, u.finished_at, u.kind, \
         q.slot_a IS NOT NULL AS freed), \
     hist AS ( \
       UPDATE runs r SET run_at = w.until, attempt = w.attempt - 1, started_at = w.started_at, node = w.node \
       FROM waiting w WHERE r.seq = w.seq), \
     steps AS ( \
       INSERT INTO run_steps (run_id, key, kind, status, attempt, started_at, wait_until) \
       SELECT id, key, kind, 'waiting', attempt, since, until FROM waiting \
       ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, attempt = excluded.attempt, \
         wait_until = excluded.wait_until \
       WHERE run_steps.status <> 'succeeded'), \
     attempts AS ( \
       INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
       SELECT id, attempt, 'waiting', started_at, finished_at, NULL FROM waiting), \
     logs AS ( \
       INSERT INTO run_logs (run_id, attempt, level, message, fields, at) \
       SELECT l.run_id, l.attempt, l.level, l.message, l.fields, l.at \
       FROM unnest($7::text[], $8::int4[], $9::text[], $10::text[], $11::text[], $12::int8[]) \
            WITH ORDINALITY AS l(run_id, attempt, level, message, fields, at, ord) \
       WHERE l.run_id IN (SELECT id FROM waiting) ORDER BY l.ord) \
     SELECT id, freed FROM waiting";

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

    /// See [`crate::store::Store::run_steps_by_key`].
    pub async fn run_steps_by_key(&self, run_id: String) -> Result<StepsByKey> {
        let client = self.conn().await?;
        steps_by_key(&client, &run_id).await
    }

    /// See [`crate::store::Store::wait_expire`]: one transaction (`waits::expire`).
    pub async fn wait_expire(&self, lease: Lease, key: String, now: i64) -> Result<Option<Value>> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let output = super::waits::expire(&tx, &lease, &key, now).await?;
        tx.commit().await?;
        Ok(output)
    }

    /// Suspends the runs of `waits` (completions whose finish is [`Finish::Wait`]) in one
    /// statement; returns the ids of those whose lease was still held. A suspended run of a
    /// limited job frees its slots: every process is told (`NOTIFY`), as by a completion, since
    /// any process may hold the runs queued behind it.
    pub(super) async fn runs_suspend(&self, waits: &[&Completion]) -> Result<HashSet<String>> {
        let client = self.conn().await?;
        let cols = SuspendColumns::new(waits);
        let (held, freed) = suspended(
            &self
                .with_settings(&client, GENERIC_PLAN, SUSPEND_SQL, &cols.params())
                .await?,
        )?;
        if freed {
            super::flow::notify(&client).await?;
        }
        if !held.is_empty() {
            self.wake();
        }
        Ok(held)
    }

    /// Suspends runs on waits for events ([`Finish::Wait`] with `event`) in one transaction:
    /// the exclusive locks of their event names (see `waits.rs`; in name order), the
    /// suspensions in one statement, then each wait stored and a matching event sent since the
    /// wait was reached looked for (their statements pipelined on the connection). Returns the
    /// ids of the runs whose lease was still held. A batch shares one commit: one per run made
    /// 100,000 runs reaching their waits take minutes.
    pub(super) async fn runs_suspend_on_events(
        &self,
        waits: &[&Completion],
    ) -> Result<HashSet<String>> {
        let names: Vec<&str> = waits
            .iter()
            .filter_map(|c| match &c.finish {
                Finish::Wait {
                    event: Some(wait), ..
                } => Some(wait.event.as_str()),
                _ => None,
            })
            .collect();
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        super::rows::exec(
            &tx,
            "SELECT count(pg_advisory_xact_lock($1, hashtext(n))) \
             FROM (SELECT DISTINCT unnest($2::text[]) AS n ORDER BY 1) s",
            &[&super::waits::LOCK_CLASS, &names],
        )
        .await?;
        let cols = SuspendColumns::new(waits);
        let (held, freed) = suspended(&rows(&tx, SUSPEND_SQL, &cols.params()).await?)?;
        let registered = waits.iter().filter_map(|c| match &c.finish {
            Finish::Wait {
                key,
                until,
                since,
                event: Some(wait),
            } if held.contains(&c.run_id) => Some(super::waits::register(
                &tx,
                &c.run_id,
                key,
                wait,
                *since,
                *until,
                c.finished_at,
            )),
            _ => None,
        });
        futures::future::try_join_all(registered).await?;
        if freed {
            super::flow::notify(&tx).await?;
        }
        tx.commit().await?;
        if !held.is_empty() {
            self.wake();
        }
        Ok(held)
    }

    /// See [`crate::store::Store::run_invoke`]: one transaction (the child's event without
    /// fan-out, its count, the child run and its queue row).
    pub async fn run_invoke(
        &self,
        lease: Lease,
        key: String,
        job_id: String,
        payload: Value,
        now: i64,
    ) -> Result<Option<String>> {
        let mut client = self.conn().await?;
        super::rows::triggers_refresh(&client, self.triggers()).await?;
        let job = self.triggers().get(&job_id).ok_or(Error::NotFound {
            what: "job",
            id: job_id,
        })?;
        let event_id = format!("{}-invoke-{key}", lease.run_id);
        let tx = self.begin(&mut client).await?;
        let held = rows(
            &tx,
            "SELECT r.id FROM run_queue q JOIN runs r ON r.seq = q.seq \
             WHERE r.id = $1 AND q.lease_token = $2 AND q.lease_until IS NOT NULL FOR SHARE OF q",
            &[&lease.run_id, &lease.token],
        )
        .await?;
        if held.is_empty() {
            return Ok(None);
        }
        let created = rows(
            &tx,
            "INSERT INTO events (id, name, payload, source, parent_run_id, timestamp, delivered_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (id) DO NOTHING RETURNING id",
            &[
                &event_id,
                &crate::model::wait::INVOKE_EVENT,
                &payload.to_string(),
                &format!("job:{}", lease.run_id),
                &lease.run_id,
                &now,
            ],
        )
        .await?;
        if created.is_empty() {
            let child = rows(
                &tx,
                "SELECT id FROM runs WHERE event_id = $1 ORDER BY seq LIMIT 1",
                &[&event_id],
            )
            .await?
            .first()
            .map(|r| r.try_get::<_, String>(0))
            .transpose()?;
            tx.commit().await?;
            return Ok(child);
        }
        super::rows::exec(
            &tx,
            "INSERT INTO event_counts (minute, shard, n) VALUES ($1::int8 / 60000, pg_backend_pid() % 16, 1) \
             ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + 1",
            &[&now],
        )
        .await?;
        // The child is queued like any run of its job: its concurrency slots, rate limit and
        // start timeout apply.
        let source = format!("job:{}", lease.run_id);
        let fields = crate::model::EventFields {
            id: &event_id,
            name: crate::model::wait::INVOKE_EVENT,
            payload: &payload,
            context: None,
            source: &source,
        };
        let mut runs = super::new_runs::NewRuns::default();
        let child = runs.add(&job, &fields, now);
        super::rows::exec(&tx, super::writer::INSERT_RUNS_SQL, &runs.params()).await?;
        super::cancel_on::arm(&tx, &runs.cancel_keys).await?;
        tx.commit().await?;
        self.wake();
        Ok(Some(child))
    }

    /// See [`crate::store::Store::callback_create`]: one transaction.
    pub async fn callback_create(
        &self,
        lease: Lease,
        key: String,
        token: String,
        since: i64,
        until: i64,
    ) -> Result<bool> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let held = rows(
            &tx,
            "SELECT q.attempt FROM run_queue q JOIN runs r ON r.seq = q.seq \
             WHERE r.id = $1 AND q.lease_token = $2 AND q.lease_until IS NOT NULL FOR SHARE OF q",
            &[&lease.run_id, &lease.token],
        )
        .await?;
        let Some(attempt) = held.first().map(|r| r.try_get::<_, i32>(0)).transpose()? else {
            return Ok(false);
        };
        let output = serde_json::json!({ "token": token }).to_string();
        super::rows::exec(
            &tx,
            "INSERT INTO run_steps (run_id, key, kind, status, attempt, started_at, wait_until, output) \
             VALUES ($1, $2, $3, 'waiting', $4, $5, $6, $7) \
             ON CONFLICT (run_id, key) DO UPDATE SET kind = excluded.kind, status = excluded.status, \
               attempt = excluded.attempt, started_at = excluded.started_at, \
               wait_until = excluded.wait_until, output = excluded.output \
             WHERE run_steps.status <> 'succeeded'",
            &[&lease.run_id, &key, &StepKind::Callback.as_str(), &attempt, &since, &until, &output],
        )
        .await?;
        super::rows::exec(
            &tx,
            "INSERT INTO run_waits (run_id, step_key, event_name, match_path, match_value, since, until) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (run_id, step_key) DO UPDATE SET match_value = excluded.match_value, \
               since = excluded.since, until = excluded.until",
            &[
                &lease.run_id,
                &key,
                &crate::model::wait::CALLBACK_EVENT,
                &crate::model::wait::CALLBACK_PATH,
                &token,
                &since,
                &until,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// See [`crate::store::Store::callback_resolve`]: one transaction.
    pub async fn callback_resolve(&self, token: String, body: Value, now: i64) -> Result<bool> {
        let output = serde_json::json!({ "body": body, "token": token }).to_string();
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let done = super::waits::callback_resolve(&tx, &token, output, now).await?;
        if done {
            // The process posted to may not run the job: every process is told at commit.
            super::flow::notify(&tx).await?;
        }
        tx.commit().await?;
        if done {
            self.wake();
        }
        Ok(done)
    }
}

/// The runs [`SUSPEND_SQL`] suspended, and whether one of them held slots (freed now).
fn suspended(rows: &[tokio_postgres::Row]) -> Result<(HashSet<String>, bool)> {
    let mut freed = false;
    let mut held = HashSet::with_capacity(rows.len());
    for r in rows {
        held.insert(r.try_get::<_, String>(0)?);
        freed |= r.try_get::<_, bool>(1)?;
    }
    Ok((held, freed))
}

/// The columns of [`SUSPEND_SQL`] for a batch of suspensions.
struct SuspendColumns<'a> {
    ids: Vec<&'a str>,
    tokens: Vec<i64>,
    keys: Vec<&'a str>,
    until: Vec<i64>,
    since: Vec<i64>,
    finished: Vec<i64>,
    logs: LogColumns<'a>,
    kinds: Vec<&'static str>,
}

impl<'a> SuspendColumns<'a> {
    fn new(waits: &[&'a Completion]) -> Self {
        let n = waits.len();
        let mut cols = SuspendColumns {
            ids: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            until: Vec::with_capacity(n),
            since: Vec::with_capacity(n),
            finished: Vec::with_capacity(n),
            logs: LogColumns::default(),
            kinds: Vec::with_capacity(n),
        };
        for c in waits {
            let Finish::Wait {
                key,
                until,
                since,
                event,
            } = &c.finish
            else {
                continue;
            };
            cols.ids.push(c.run_id.as_str());
            cols.tokens.push(c.token);
            cols.keys.push(key.as_str());
            cols.until.push(*until);
            cols.since.push(*since);
            cols.kinds.push(
                event
                    .as_ref()
                    .map_or(StepKind::Wait, crate::model::EventWait::step_kind)
                    .as_str(),
            );
            cols.finished.push(c.finished_at);
            cols.logs.add(&c.run_id, &c.logs);
        }
        cols
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 13] {
        [
            &self.ids,
            &self.tokens,
            &self.keys,
            &self.until,
            &self.since,
            &self.finished,
            &self.logs.run,
            &self.logs.attempt,
            &self.logs.level,
            &self.logs.message,
            &self.logs.fields,
            &self.logs.at,
            &self.kinds,
        ]
    }
}
