//! Write operations of the PostgreSQL backend for events, jobs, pruning and leader leases (the run
//! lifecycle is in `runs.rs`). Each runs in one transaction (started `READ ONLY`
//! while the store is switched to read-only), and each batch is one statement over `UNNEST`
//! arrays where it can be, so a batch costs one round trip whatever its size.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Object, Transaction};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::read::{event_from_row, EVENT_SELECT};
use super::{exec, rows, PgStore};
use crate::filter::Filter;
use crate::model::JobSpec;
use crate::model::RetryPolicy;
use crate::model::StoredEvent;
use crate::store::{Error, Inserted, NewEvent, Result, Triggers};

/// Inserts a batch of events and, in the same statement, the runs of those that were new, their
/// queue rows and their per-minute counts (`event_counts`, `0015_event_counts.sql`). Rows go in
/// id order: two transactions inserting overlapping ids (writers in flight at once, several
/// nodes) then wait for each other in one order instead of deadlocking on the unique index.
pub(super) const INSERT_EVENTS_SQL: &str = "WITH ev AS ( \
       INSERT INTO events (id, name, payload, context, source, parent_run_id, timestamp, deliver_at, delivered_at) \
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
                            $7::int8[], $8::int8[], $9::int8[]) \
         AS u(id, name, payload, context, source, parent_run_id, ts, deliver_at, delivered_at) \
       ORDER BY u.id \
       ON CONFLICT (id) DO NOTHING RETURNING id, timestamp), \
     c AS ( \
       INSERT INTO event_counts (minute, shard, n) \
       SELECT timestamp / 60000, pg_backend_pid() % 16, count(*) FROM ev GROUP BY 1 ORDER BY 1 \
       ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + excluded.n), \
     r AS ( \
       INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at) \
       SELECT u.id, u.event_id, u.job_id, u.job_version, 'queued', 0, u.max_attempts, u.at, u.at \
       FROM unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::int4[], $15::int8[]) \
            WITH ORDINALITY AS u(id, event_id, job_id, job_version, max_attempts, at, ord) \
       WHERE u.event_id IN (SELECT id FROM ev) ORDER BY u.ord \
       RETURNING seq, job_id, run_at), \
     q AS (INSERT INTO run_queue (seq, job_id, run_at) SELECT seq, job_id, run_at FROM r) \
     SELECT id FROM ev";

/// Inserts runs (scheduled events being delivered) and their queue rows.
const INSERT_RUNS_SQL: &str = "WITH r AS ( \
       INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at) \
       SELECT u.id, u.event_id, u.job_id, u.job_version, 'queued', 0, u.max_attempts, u.at, u.at \
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int4[], $6::int8[]) \
            WITH ORDINALITY AS u(id, event_id, job_id, job_version, max_attempts, at, ord) ORDER BY u.ord \
       RETURNING seq, job_id, run_at) \
     INSERT INTO run_queue (seq, job_id, run_at) SELECT seq, job_id, run_at FROM r";

/// A new run id: time-ordered, so ids sort by creation (as on SQLite).
fn new_run_id() -> String {
    format!("run_{}", uuid::Uuid::now_v7().simple())
}

/// One event to insert, with its JSON already serialized.
pub(super) struct EventRow<'a> {
    pub(super) event: &'a NewEvent,
    pub(super) payload: &'a str,
    pub(super) context: Option<&'a str>,
}

/// Columns of runs to insert.
#[derive(Default)]
struct NewRuns {
    ids: Vec<String>,
    event_ids: Vec<String>,
    job_ids: Vec<String>,
    versions: Vec<String>,
    max_attempts: Vec<i32>,
    at: Vec<i64>,
}

impl NewRuns {
    /// Adds one queued run per job matching the event; returns their ids.
    fn fan_out(
        &mut self,
        triggers: &Triggers,
        event_id: &str,
        name: &str,
        payload: &Value,
        now: i64,
    ) -> Vec<String> {
        let mut ids = Vec::new();
        for job in triggers.matching(name, payload) {
            let id = new_run_id();
            self.ids.push(id.clone());
            self.event_ids.push(event_id.to_string());
            self.job_ids.push(job.id.clone());
            self.versions.push(job.version.clone());
            self.max_attempts
                .push(i32::try_from(job.retry.max_attempts).unwrap_or(i32::MAX));
            self.at.push(now);
            ids.push(id);
        }
        ids
    }
}

/// Reads an `integer` column as a count.
pub(super) fn u32_of(row: &tokio_postgres::Row, i: usize) -> Result<u32> {
    let v: i32 = row.try_get(i)?;
    u32::try_from(v).map_err(|_| Error::Corrupt(format!("negative count {v}")))
}

/// A batch of events ready to insert: the columns of the new ones (the first of each id) and of
/// the runs of the immediate ones, as arrays for [`INSERT_EVENTS_SQL`].
pub(super) struct PreparedEvents<'a> {
    batch: &'a [EventRow<'a>],
    ids: Vec<&'a str>,
    names: Vec<&'a str>,
    payloads: Vec<&'a str>,
    contexts: Vec<Option<&'a str>>,
    sources: Vec<&'a str>,
    parents: Vec<Option<&'a str>>,
    stamps: Vec<i64>,
    deliver: Vec<Option<i64>>,
    delivered: Vec<Option<i64>>,
    runs: NewRuns,
    run_ids: Vec<Vec<String>>,
    candidate: Vec<bool>,
    /// True when inserting would make work runnable or scheduled (workers should be woken).
    pub(super) wake: bool,
}

impl<'a> PreparedEvents<'a> {
    /// Fans each new event out to the jobs in `triggers` and lays the rows out as arrays.
    pub(super) fn new(triggers: &Triggers, batch: &'a [EventRow<'a>]) -> Self {
        let n = batch.len();
        let mut p = PreparedEvents {
            batch,
            ids: Vec::with_capacity(n),
            names: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            contexts: Vec::with_capacity(n),
            sources: Vec::with_capacity(n),
            parents: Vec::with_capacity(n),
            stamps: Vec::with_capacity(n),
            deliver: Vec::with_capacity(n),
            delivered: Vec::with_capacity(n),
            runs: NewRuns::default(),
            run_ids: vec![Vec::new(); n],
            candidate: vec![false; n],
            wake: false,
        };
        let mut first = HashSet::with_capacity(n);
        for (i, row) in batch.iter().enumerate() {
            let ev = row.event;
            if !first.insert(ev.id.as_str()) {
                continue;
            }
            p.candidate[i] = true;
            let immediate = ev.deliver_at.is_none_or(|t| t <= ev.now);
            p.ids.push(ev.id.as_str());
            p.names.push(ev.name.as_str());
            p.payloads.push(row.payload);
            p.contexts.push(row.context);
            p.sources.push(ev.source.as_str());
            p.parents.push(ev.parent_run_id.as_deref());
            p.stamps.push(ev.now);
            p.deliver.push(ev.deliver_at);
            p.delivered.push(immediate.then_some(ev.now));
            if immediate {
                p.run_ids[i] = p
                    .runs
                    .fan_out(triggers, &ev.id, &ev.name, &ev.payload, ev.now);
                p.wake |= !p.run_ids[i].is_empty();
            } else {
                p.wake = true;
            }
        }
        p
    }

    /// The parameters of [`INSERT_EVENTS_SQL`].
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 15] {
        [
            &self.ids,
            &self.names,
            &self.payloads,
            &self.contexts,
            &self.sources,
            &self.parents,
            &self.stamps,
            &self.deliver,
            &self.delivered,
            &self.runs.ids,
            &self.runs.event_ids,
            &self.runs.job_ids,
            &self.runs.versions,
            &self.runs.max_attempts,
            &self.runs.at,
        ]
    }

    /// The ids the insert created, from its rows, and the ids that existed before (to look up).
    pub(super) fn created(&self, rows: &[Row]) -> Result<(HashSet<String>, Vec<String>)> {
        let created: HashSet<String> = rows
            .iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<Result<_, _>>()?;
        let existing = self
            .batch
            .iter()
            .enumerate()
            .filter(|(i, row)| !(self.candidate[*i] && created.contains(&row.event.id)))
            .map(|(_, row)| row.event.id.clone())
            .collect();
        Ok((created, existing))
    }

    /// What each row did: the new events as inserted, the others as `stored` holds them.
    pub(super) fn finish(
        self,
        created: &HashSet<String>,
        stored: &HashMap<String, StoredEvent>,
    ) -> Result<Vec<Inserted>> {
        let t = crate::model::ms_to_time;
        let mut run_ids = self.run_ids;
        self.batch
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let ev = row.event;
                if self.candidate[i] && created.contains(&ev.id) {
                    let immediate = ev.deliver_at.is_none_or(|at| at <= ev.now);
                    return Ok(Inserted {
                        event: StoredEvent {
                            id: ev.id.clone(),
                            name: ev.name.clone(),
                            payload: ev.payload.clone(),
                            context: ev.context.clone(),
                            source: ev.source.clone(),
                            timestamp: t(ev.now),
                            deliver_at: ev.deliver_at.map(t),
                            delivered_at: immediate.then(|| t(ev.now)),
                            cancelled_at: None,
                            parent_run_id: ev.parent_run_id.clone(),
                            run_ids: std::mem::take(&mut run_ids[i]),
                        },
                        created: true,
                    });
                }
                stored
                    .get(&ev.id)
                    .cloned()
                    .map(|event| Inserted {
                        event,
                        created: false,
                    })
                    .ok_or_else(|| Error::NotFound {
                        what: "event",
                        id: ev.id.clone(),
                    })
            })
            .collect()
    }
}

/// Reads stored events by id.
pub(super) async fn events_by_ids<C: GenericClient>(
    c: &C,
    ids: &[String],
) -> Result<HashMap<String, StoredEvent>> {
    let mut stored = HashMap::new();
    if ids.is_empty() {
        return Ok(stored);
    }
    for r in rows(
        c,
        &format!("SELECT {EVENT_SELECT} FROM events WHERE id = ANY($1)"),
        &[&ids],
    )
    .await?
    {
        let e = event_from_row(&r)?;
        stored.insert(e.id.clone(), e);
    }
    Ok(stored)
}

/// Inserts events (the first of each id; an existing id is left as stored) and the runs of the
/// new immediate ones, in the caller's transaction. Returns what each row did, and whether
/// workers should be woken (a `NOTIFY` is then queued in the transaction).
pub(super) async fn insert_events<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    batch: &[EventRow<'_>],
) -> Result<(Vec<Inserted>, bool)> {
    let prepared = PreparedEvents::new(triggers, batch);
    let inserted = rows(c, INSERT_EVENTS_SQL, &prepared.params()).await?;
    let (created, existing) = prepared.created(&inserted)?;
    let stored = events_by_ids(c, &existing).await?;
    let wake = prepared.wake;
    Ok((prepared.finish(&created, &stored)?, wake))
}

/// The wake-up hint for other processes (`$1` = [`CHANNEL`]).
pub(super) const NOTIFY_SQL: &str = "SELECT pg_notify($1, '')";

/// Loads stored job definitions (so fan-out knows jobs defined by other processes).
pub(super) async fn jobs_load<C: GenericClient>(c: &C) -> Result<Vec<JobSpec>> {
    let mut specs = Vec::new();
    for r in rows(
        c,
        "SELECT id, name, version, event, filter, max_attempts, timeout_ms, concurrency FROM jobs",
        &[],
    )
    .await?
    {
        let filter: Option<String> = r.try_get(4)?;
        let filter = match filter {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                Some(Filter::parse(&v).map_err(|e| Error::Corrupt(e.to_string()))?)
            }
            None => None,
        };
        let timeout_ms: i64 = r.try_get(6)?;
        let concurrency: Option<i32> = r.try_get(7)?;
        specs.push(JobSpec {
            id: r.try_get(0)?,
            name: r.try_get(1)?,
            version: r.try_get(2)?,
            event: r.try_get(3)?,
            filter,
            schedule: None,
            retry: RetryPolicy::default().max_attempts(u32_of(&r, 5)?),
            timeout: Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0)),
            concurrency: concurrency.and_then(|c| u32::try_from(c).ok()),
        });
    }
    Ok(specs)
}

/// Stores a job definition, of `endpoint`'s index or (`None`) defined in code. A job of an
/// endpoint is never overwritten by a definition from code or from another endpoint: false then.
pub(super) async fn job_put<C: GenericClient>(
    c: &C,
    spec: &JobSpec,
    endpoint: Option<&str>,
    now: i64,
) -> Result<bool> {
    let filter = spec.filter.as_ref().map(|f| f.as_json().to_string());
    let max_attempts = i32::try_from(spec.retry.max_attempts).unwrap_or(i32::MAX);
    let timeout = i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX);
    let concurrency = spec
        .concurrency
        .map(|c| i32::try_from(c).unwrap_or(i32::MAX));
    let n = exec(
        c,
        "INSERT INTO jobs (id, name, version, event, filter, max_attempts, timeout_ms, concurrency, updated_at, endpoint_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, version = excluded.version, event = excluded.event, \
         filter = excluded.filter, max_attempts = excluded.max_attempts, timeout_ms = excluded.timeout_ms, \
         concurrency = excluded.concurrency, updated_at = GREATEST(excluded.updated_at, jobs.updated_at + 1), \
         endpoint_id = excluded.endpoint_id \
         WHERE jobs.endpoint_id IS NULL OR jobs.endpoint_id = excluded.endpoint_id",
        &[&spec.id, &spec.name, &spec.version, &spec.event, &filter, &max_attempts, &timeout, &concurrency, &now, &endpoint],
    )
    .await?;
    Ok(n == 1)
}

/// Writes `spec`'s schedule row in the caller's transaction: removed when it has no schedule,
/// kept as it is when the schedule did not change (its next tick too), else (re)started from the
/// first tick after `now`.
pub(super) async fn schedule_sync<C: GenericClient>(c: &C, spec: &JobSpec, now: i64) -> Result<()> {
    let next = spec.schedule.as_ref().and_then(|s| s.next_after(now));
    let (Some(schedule), Some(next)) = (&spec.schedule, next) else {
        exec(c, "DELETE FROM schedules WHERE job_id = $1", &[&spec.id]).await?;
        return Ok(());
    };
    let (text, tz) = schedule.to_stored();
    // Not one `ON CONFLICT DO UPDATE … WHERE`: that locks the existing row even when it leaves
    // it unchanged, and the scheduler (`SKIP LOCKED`) would then skip a due tick until the next
    // pass. A plain UPDATE locks only a row it changes.
    exec(
        c,
        "INSERT INTO schedules (job_id, spec, timezone, next_tick) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (job_id) DO NOTHING",
        &[&spec.id, &text, &tz, &next],
    )
    .await?;
    exec(
        c,
        "UPDATE schedules SET spec = $2, timezone = $3, next_tick = $4 \
         WHERE job_id = $1 AND (spec IS DISTINCT FROM $2 OR timezone IS DISTINCT FROM $3)",
        &[&spec.id, &text, &tz, &next],
    )
    .await?;
    Ok(())
}

/// Reads a row of `schedules` (`job_id, spec, timezone, next_tick, last_tick`).
fn schedule_row(r: &Row) -> Result<crate::store::schedules::ScheduleRow> {
    Ok((
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
    ))
}

/// Reloads stored job definitions when the job table changed (another process defined a job).
pub(super) async fn triggers_refresh<C: GenericClient>(c: &C, triggers: &Triggers) -> Result<()> {
    let r = rows(
        c,
        "SELECT count(*), coalesce(max(updated_at), 0)::int8 FROM jobs",
        &[],
    )
    .await?;
    let revision = match r.first() {
        Some(r) => (r.try_get::<_, i64>(0)?, r.try_get::<_, i64>(1)?),
        None => (0, 0),
    };
    if triggers.revision_changed(revision) {
        triggers.replace_stored(jobs_load(c).await?);
    }
    Ok(())
}

/// Settings of a [`PgStore::with_settings`] transaction whose commit waits for the WAL flush.
pub(super) const GENERIC_PLAN: &str = "SET LOCAL plan_cache_mode = force_generic_plan";

/// Settings of a [`PgStore::with_settings`] transaction for a write whose loss in a server crash
/// costs nothing but a re-run, a lease extension: its commit does not wait for the WAL flush. If
/// the server crashes before the flush, the lease is simply shorter; the fencing token keeps
/// at-least-once. Every other write (events, runs, outcomes) stays synchronous.
pub(super) const GENERIC_PLAN_NO_WAIT: &str =
    "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL synchronous_commit = off";

impl PgStore {
    /// Starts a write transaction on `client` (`READ ONLY` while the store is switched so).
    pub(super) async fn begin<'a>(&self, client: &'a mut Object) -> Result<Transaction<'a>> {
        Ok(client
            .build_transaction()
            .read_only(self.read_only())
            .start()
            .await?)
    }

    /// Runs one statement as its own transaction: in autocommit (one round trip) or, while the
    /// store is read-only, pipelined inside `BEGIN READ ONLY` … `COMMIT` so the server refuses it.
    pub(super) async fn write_one(
        &self,
        c: &Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let st = c.prepare_cached(sql).await?;
        if !self.read_only() {
            return Ok(c.query(&st, params).await?);
        }
        self.pipelined(c, "BEGIN READ ONLY", &st, params).await
    }

    /// Runs one statement of the run lifecycle (claim, heartbeat, completion, the look at the
    /// next due run) as its own transaction (`READ ONLY` while the store is switched so), after the
    /// `SET LOCAL`s in `settings`, in one round trip. Each sets
    /// `plan_cache_mode = force_generic_plan` (see [`GENERIC_PLAN`]): these statements look every
    /// run up by its key, and the generic plan, made for any batch, does that; a custom plan
    /// (what PostgreSQL uses for a connection's first five executions) is estimated from the
    /// batch's values and the tables' statistics, which are stale right after a burst of work,
    /// and costs a planning on every call.
    pub(super) async fn with_settings(
        &self,
        c: &Object,
        settings: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let st = c.prepare_cached(sql).await?;
        let mode = if self.read_only() { " READ ONLY" } else { "" };
        self.pipelined(c, &format!("BEGIN{mode}; {settings}"), &st, params)
            .await
    }

    /// Sends `begin`, the statement and `COMMIT` in one round trip. A failed statement aborts the
    /// transaction, and the `COMMIT` after it then rolls back.
    async fn pipelined(
        &self,
        c: &Object,
        begin: &str,
        st: &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let (began, result, ended) = futures::join!(
            c.batch_execute(begin),
            c.query(st, params),
            c.batch_execute("COMMIT"),
        );
        began?;
        let result = result?;
        ended?;
        Ok(result)
    }

    /// Stores a job definition and its schedule in one transaction (see
    /// [`crate::store::Store::job_define_at`]).
    pub async fn job_define(&self, spec: JobSpec, now: i64) -> Result<()> {
        let stamp = chrono::Utc::now().timestamp_millis();
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        if job_put(&tx, &spec, None, stamp).await? {
            schedule_sync(&tx, &spec, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// See [`crate::store::Store::schedules_fire_due`]: one transaction takes the due schedules
    /// with `FOR UPDATE SKIP LOCKED` (a node running at the same time skips them, and sees them
    /// moved once this commits), inserts their ticks' events and moves their next ticks.
    pub async fn schedules_fire_due(&self, now: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let due = rows(
            &tx,
            "SELECT job_id, spec, timezone, next_tick, last_tick FROM schedules \
             WHERE next_tick <= $1 ORDER BY next_tick LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now, &limit],
        )
        .await?;
        let mut events = Vec::with_capacity(due.len());
        for r in &due {
            let (job, text, tz, due_at, last) = schedule_row(r)?;
            let schedule = match crate::schedule::Schedule::from_stored(&text, tz.as_deref()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(job = %job, error = %e, "dropping a stored schedule that no longer reads");
                    exec(&tx, "DELETE FROM schedules WHERE job_id = $1", &[&job]).await?;
                    continue;
                }
            };
            let (tick, next) = crate::store::schedules::tick_due(&schedule, due_at, now);
            match next {
                Some(next) => {
                    exec(
                        &tx,
                        "UPDATE schedules SET next_tick = $2, last_tick = $3 WHERE job_id = $1",
                        &[&job, &next, &tick],
                    )
                    .await?
                }
                None => exec(&tx, "DELETE FROM schedules WHERE job_id = $1", &[&job]).await?,
            };
            events.push(crate::store::schedules::tick_event(&job, tick, last, now));
        }
        let texts: Vec<String> = events.iter().map(|e| e.payload.to_string()).collect();
        let batch: Vec<EventRow<'_>> = events
            .iter()
            .zip(&texts)
            .map(|(event, payload)| EventRow {
                event,
                payload,
                context: None,
            })
            .collect();
        let wake = if batch.is_empty() {
            false
        } else {
            insert_events(&tx, self.triggers(), &batch).await?.1
        };
        tx.commit().await?;
        if wake {
            self.wake();
        }
        Ok(events.len())
    }

    /// See [`crate::store::Store::schedules_list`].
    pub async fn schedules_list(&self) -> Result<Vec<crate::store::ScheduleState>> {
        let client = self.conn().await?;
        let found = rows(
            &client,
            "SELECT job_id, spec, timezone, next_tick, last_tick FROM schedules ORDER BY job_id",
            &[],
        )
        .await?;
        let mut out = Vec::with_capacity(found.len());
        for r in &found {
            let (job_id, text, tz, next_tick, last_tick) = schedule_row(r)?;
            if let Ok(schedule) = crate::schedule::Schedule::from_stored(&text, tz.as_deref()) {
                out.push(crate::store::ScheduleState {
                    job_id,
                    schedule,
                    next_tick,
                    last_tick,
                });
            }
        }
        Ok(out)
    }

    /// See [`crate::store::Store::event_insert_many`].
    pub async fn event_insert_many(&self, events: Vec<NewEvent>) -> Result<Vec<Inserted>> {
        let texts: Vec<(String, Option<String>)> = events
            .iter()
            .map(|ev| {
                (
                    ev.payload.to_string(),
                    ev.context.as_ref().map(Value::to_string),
                )
            })
            .collect();
        let batch: Vec<EventRow<'_>> = events
            .iter()
            .zip(&texts)
            .map(|(event, (payload, context))| EventRow {
                event,
                payload,
                context: context.as_deref(),
            })
            .collect();
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let (inserted, wake) = insert_events(&tx, self.triggers(), &batch).await?;
        tx.commit().await?;
        if wake {
            self.wake();
        }
        Ok(inserted)
    }

    /// See [`crate::store::Store::event_cancel`].
    pub async fn event_cancel(&self, id: String, now: i64) -> Result<StoredEvent> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = exec(
            &tx,
            "UPDATE events SET cancelled_at = $2 WHERE id = $1 AND delivered_at IS NULL AND cancelled_at IS NULL",
            &[&id, &now],
        )
        .await?;
        let event = rows(
            &tx,
            &format!("SELECT {EVENT_SELECT} FROM events WHERE id = $1"),
            &[&id],
        )
        .await?
        .first()
        .map(event_from_row)
        .transpose()?
        .ok_or_else(|| Error::NotFound {
            what: "event",
            id: id.clone(),
        })?;
        if n == 0 {
            let why = if event.cancelled_at.is_some() {
                "it was already cancelled"
            } else {
                "it was already delivered"
            };
            return Err(Error::Conflict(format!(
                "event {id:?} cannot be cancelled: {why}"
            )));
        }
        tx.commit().await?;
        Ok(event)
    }

    /// See [`crate::store::Store::events_deliver_due`]. Several nodes may call it at once: the
    /// due events are taken with `FOR UPDATE SKIP LOCKED` and marked delivered by the same
    /// statement, so each is delivered (its runs created) exactly once.
    pub async fn events_deliver_due(&self, now: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        triggers_refresh(&client, self.triggers()).await?;
        let tx = self.begin(&mut client).await?;
        let due = rows(
            &tx,
            // The inner select locks each row in its latest version and checks the condition on
            // that version, so the rows it returns are due and nobody can deliver or cancel them
            // before this transaction ends: the update finds them by key alone. (Repeating the
            // condition there let the planner scan all of `events_due` to find the batch.)
            "UPDATE events e SET delivered_at = $1 \
             WHERE e.seq = ANY(ARRAY(SELECT seq FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL \
                 AND deliver_at <= $1 ORDER BY deliver_at LIMIT $2 FOR UPDATE SKIP LOCKED)) \
             RETURNING e.id, e.name, e.payload",
            &[&now, &limit],
        )
        .await?;
        let mut runs = NewRuns::default();
        for r in &due {
            let id: String = r.try_get(0)?;
            let name: String = r.try_get(1)?;
            let payload = super::read::json_text(&r.try_get::<_, String>(2)?)?;
            runs.fan_out(self.triggers(), &id, &name, &payload, now);
        }
        if !runs.ids.is_empty() {
            exec(
                &tx,
                INSERT_RUNS_SQL,
                &[
                    &runs.ids,
                    &runs.event_ids,
                    &runs.job_ids,
                    &runs.versions,
                    &runs.max_attempts,
                    &runs.at,
                ],
            )
            .await?;
        }
        tx.commit().await?;
        if !runs.ids.is_empty() {
            self.wake();
        }
        Ok(due.len())
    }

    /// See [`crate::store::Store::prune`]: one bounded batch, deleted in one statement.
    pub async fn events_prune(&self, before: i64, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        // Its estimated cost (joins over the history tables) passes `jit_above_cost`, and the JIT
        // compilation took 340 ms of each 460 ms batch of 5,000 events (pg_stat_statements).
        tx.batch_execute("SET LOCAL jit = off").await?;
        let r = rows(
            &tx,
            "WITH doomed AS ( \
               SELECT e.id FROM events e WHERE e.timestamp < $1 \
                 AND (e.delivered_at IS NOT NULL OR e.cancelled_at IS NOT NULL) \
                 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.event_id = e.id AND r.status IN ('queued', 'running')) \
               ORDER BY e.timestamp LIMIT $2 FOR UPDATE SKIP LOCKED), \
             druns AS (DELETE FROM runs r USING doomed WHERE r.event_id = doomed.id \
               RETURNING r.id, r.job_id, r.status, r.finished_at), \
             dlogs AS (DELETE FROM run_logs l USING druns WHERE l.run_id = druns.id), \
             datt AS (DELETE FROM run_attempts a USING druns WHERE a.run_id = druns.id), \
             dsteps AS (DELETE FROM run_steps s USING druns WHERE s.run_id = druns.id), \
             dout AS (UPDATE run_outcomes o SET n = o.n - d.k FROM ( \
                 SELECT finished_at / 60000 AS minute, job_id, status, count(*) AS k FROM druns \
                 WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3) d \
               WHERE o.minute = d.minute AND o.job_id = d.job_id AND o.status = d.status), \
             dev AS (DELETE FROM events e USING doomed WHERE e.id = doomed.id RETURNING e.timestamp), \
             dcount AS (INSERT INTO event_counts (minute, shard, n) \
               SELECT timestamp / 60000, pg_backend_pid() % 16, -count(*) FROM dev GROUP BY 1 ORDER BY 1 \
               ON CONFLICT (minute, shard) DO UPDATE SET n = event_counts.n + excluded.n) \
             SELECT count(*) FROM dev",
            &[&before, &limit],
        )
        .await?;
        // Minutes whose runs are all pruned count nothing any more.
        exec(
            &tx,
            "DELETE FROM run_outcomes WHERE n <= 0 AND minute < $1::int8 / 60000",
            &[&before],
        )
        .await?;
        // Minutes whose events are all pruned: their shards add up to nothing.
        exec(
            &tx,
            "DELETE FROM event_counts WHERE minute IN ( \
               SELECT minute FROM event_counts WHERE minute < $1::int8 / 60000 \
               GROUP BY minute HAVING sum(n) = 0)",
            &[&before],
        )
        .await?;
        tx.commit().await?;
        let n: i64 = r.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// See [`crate::store::Store::leader_acquire`]: one statement.
    pub async fn leader_acquire(
        &self,
        name: String,
        holder: String,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool> {
        let expires = now.saturating_add(ttl_ms);
        let client = self.conn().await?;
        let r = self
            .write_one(
            &client,
            "INSERT INTO leaders (name, holder, expires_at) VALUES ($1, $2, $4) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leaders.holder = excluded.holder OR leaders.expires_at <= $3 RETURNING holder",
            &[&name, &holder, &now, &expires],
        )
        .await?;
        Ok(!r.is_empty())
    }

    /// See [`crate::store::Store::leader_release`].
    pub async fn leader_release(&self, name: String, holder: String) -> Result<()> {
        let client = self.conn().await?;
        self.write_one(
            &client,
            "DELETE FROM leaders WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )
        .await?;
        Ok(())
    }
}
