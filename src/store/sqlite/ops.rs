//! Write operations of the SQLite backend. Each public method is one operation of the writer's
//! batch transaction, inside its own savepoint.

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::read::{event_by_id, json_text};
use super::{Commit, Guard, SqliteStore, WriteCtx};
use crate::filter::Filter;
use crate::model::JobSpec;
use crate::model::RetryPolicy;
use crate::model::{StepKind, StepStatus, StoredEvent};
use crate::store::{
    ClaimParams, ClaimedRun, Completion, Error, Finish, Inserted, Lease, NewEvent, Result,
};

/// The runs a claim takes: runnable runs of the given jobs (`?4`, a JSON array), oldest due first,
/// at most `?5`. It walks the partial index of queued runs in due order and stops at the limit, so
/// its cost does not grow with the depth of the queue. Paused jobs are taken off the list of jobs
/// (once per claim, not per run), so their runs stay queued.
///
/// It reads each run with its event's name and payload in one pass; the claim then updates the
/// runs one by one by rowid. (`UPDATE … WHERE seq IN (…) RETURNING` gathers the keys and the
/// returned rows in two ephemeral tables, and the payloads needed a lookup per run after it.)
pub(super) const CLAIM_SELECT: &str =
    "SELECT r.seq, r.id, r.event_id, r.job_id, r.attempt + 1, r.max_attempts, e.name, e.payload \
     FROM runs r INDEXED BY runs_runnable JOIN events e ON e.id = r.event_id \
     WHERE r.status = 'queued' AND r.run_at <= ?1 AND r.job_id IN (SELECT value FROM json_each(?2) \
       WHERE value NOT IN (SELECT id FROM jobs WHERE paused = 1)) \
     ORDER BY r.run_at, r.seq LIMIT ?3";

/// A new run id: time-ordered, so ids sort by creation.
pub(crate) fn new_run_id() -> String {
    format!("run_{}", uuid::Uuid::now_v7().simple())
}

/// Loads stored job definitions (so fan-out knows jobs defined by other processes).
pub(super) fn jobs_load(conn: &Connection) -> Result<Vec<JobSpec>> {
    let mut stmt = conn.prepare(
        "SELECT id, name, version, event, filter, max_attempts, timeout_ms, concurrency FROM jobs",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, u32>(5)?,
            r.get::<_, i64>(6)?,
            r.get::<_, Option<u32>>(7)?,
        ))
    })?;
    let mut specs = Vec::new();
    for row in rows {
        let (id, name, version, event, filter, max_attempts, timeout_ms, concurrency) = row?;
        let filter = match filter {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                Some(Filter::parse(&v).map_err(|e| Error::Corrupt(e.to_string()))?)
            }
            None => None,
        };
        specs.push(JobSpec {
            id,
            name,
            version,
            event,
            filter,
            schedule: None,
            retry: RetryPolicy::default().max_attempts(max_attempts),
            timeout: Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0)),
            concurrency,
        });
    }
    Ok(specs)
}

/// Reloads stored job definitions when the job table changed (another process defined a job), so
/// fan-out starts every job known to the database. One tiny query per batch.
pub(super) fn triggers_refresh(conn: &Connection, triggers: &crate::store::Triggers) -> Result<()> {
    let revision: (i64, i64) = conn
        .prepare_cached("SELECT count(*), coalesce(max(updated_at), 0) FROM jobs")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if triggers.revision_changed(revision) {
        triggers.replace_stored(jobs_load(conn)?);
    }
    Ok(())
}

/// A completion that ends the run, with the rows its fenced update wrote (1 while the lease
/// held): counted for `job` when written.
fn final_outcome<'c, 'e>(
    outcome: &'static str,
    updated: usize,
    job: &'c str,
    error: Option<&'e str>,
) -> (&'static str, bool, Option<&'c str>, Option<&'e str>) {
    (outcome, updated == 1, (updated == 1).then_some(job), error)
}

/// Creates one queued run per matching job. Returns the run ids.
fn fanout(
    ctx: &mut WriteCtx<'_>,
    event_id: &str,
    name: &str,
    payload: &Value,
    now: i64,
) -> Result<Vec<String>> {
    let jobs = ctx.triggers.matching(name, payload);
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let mut stmt = ctx.conn.prepare_cached(
        "INSERT INTO runs (id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, created_at) \
         VALUES (?1, ?2, ?3, ?4, 'queued', 0, ?5, ?6, ?6)",
    )?;
    let mut ids = Vec::with_capacity(jobs.len());
    for job in jobs {
        let id = new_run_id();
        stmt.execute(params![
            id,
            event_id,
            job.id,
            job.version,
            job.retry.max_attempts,
            now
        ])?;
        ids.push(id);
    }
    ctx.wake = true;
    Ok(ids)
}

/// Inserts one event (and, when immediate, its runs) inside the caller's write operation.
pub(super) fn insert_event(
    ctx: &mut WriteCtx<'_>,
    ev: &NewEvent,
    payload_text: &str,
    context_text: Option<&str>,
) -> Result<Inserted> {
    let immediate = ev.deliver_at.is_none_or(|t| t <= ev.now);
    let delivered_at = immediate.then_some(ev.now);
    let inserted = ctx
        .conn
        .prepare_cached(
            "INSERT INTO events (id, name, payload, context, source, parent_run_id, timestamp, deliver_at, delivered_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![
            ev.id,
            ev.name,
            payload_text,
            context_text,
            ev.source,
            ev.parent_run_id,
            ev.now,
            ev.deliver_at,
            delivered_at
        ])?;
    if inserted == 0 {
        let event = event_by_id(ctx.conn, &ev.id)?.ok_or_else(|| Error::NotFound {
            what: "event",
            id: ev.id.clone(),
        })?;
        return Ok(Inserted {
            event,
            created: false,
        });
    }
    ctx.tally.events(ev.now, 1);
    let run_ids = if immediate {
        fanout(ctx, &ev.id, &ev.name, &ev.payload, ev.now)?
    } else {
        Vec::new()
    };
    if !immediate {
        ctx.wake = true; // the scheduler may need to wake earlier than it planned
    }
    let t = crate::model::ms_to_time;
    Ok(Inserted {
        event: StoredEvent {
            id: ev.id.clone(),
            name: ev.name.clone(),
            payload: ev.payload.clone(),
            context: ev.context.clone(),
            source: ev.source.clone(),
            timestamp: t(ev.now),
            deliver_at: ev.deliver_at.map(t),
            delivered_at: delivered_at.map(t),
            cancelled_at: None,
            parent_run_id: ev.parent_run_id.clone(),
            run_ids,
        },
        created: true,
    })
}

fn record_attempt(
    conn: &Connection,
    run_id: &str,
    attempt: u32,
    outcome: &str,
    started: Option<i64>,
    finished: i64,
    error: Option<&str>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![run_id, attempt, outcome, started, finished, error])?;
    Ok(())
}

/// Stores a job definition, of `endpoint`'s index or (`None`) defined in code. A job of an
/// endpoint is never overwritten by a definition from code or from another endpoint: false then.
pub(super) fn job_put(
    conn: &Connection,
    spec: &JobSpec,
    endpoint: Option<&str>,
    now: i64,
) -> Result<bool> {
    let filter = spec.filter.as_ref().map(|f| f.as_json().to_string());
    let n = conn
        .prepare_cached(
            "INSERT INTO jobs (id, name, version, event, filter, max_attempts, timeout_ms, concurrency, updated_at, endpoint_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, version = excluded.version, event = excluded.event, \
             filter = excluded.filter, max_attempts = excluded.max_attempts, timeout_ms = excluded.timeout_ms, \
             concurrency = excluded.concurrency, updated_at = max(excluded.updated_at, jobs.updated_at + 1), \
             endpoint_id = excluded.endpoint_id \
             WHERE jobs.endpoint_id IS NULL OR jobs.endpoint_id = excluded.endpoint_id",
        )?
        .execute(params![
            spec.id,
            spec.name,
            spec.version,
            spec.event,
            filter,
            spec.retry.max_attempts,
            i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX),
            spec.concurrency,
            now,
            endpoint
        ])?;
    Ok(n == 1)
}

/// Writes `spec`'s schedule row: removed when it has no schedule, kept as it is when the schedule
/// did not change (its next tick too), else (re)started from the first tick after `now`.
pub(super) fn schedule_sync(conn: &Connection, spec: &JobSpec, now: i64) -> Result<()> {
    let Some(schedule) = &spec.schedule else {
        conn.prepare_cached("DELETE FROM schedules WHERE job_id = ?1")?
            .execute([&spec.id])?;
        return Ok(());
    };
    let (text, tz) = schedule.to_stored();
    let stored: Option<(String, Option<String>)> = conn
        .prepare_cached("SELECT spec, timezone FROM schedules WHERE job_id = ?1")?
        .query_row([&spec.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if stored.as_ref() == Some(&(text.clone(), tz.clone())) {
        return Ok(());
    }
    match schedule.next_after(now) {
        Some(next) => {
            conn.prepare_cached(
                "INSERT INTO schedules (job_id, spec, timezone, next_tick) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (job_id) DO UPDATE SET spec = excluded.spec, timezone = excluded.timezone, \
                 next_tick = excluded.next_tick",
            )?
            .execute(params![spec.id, text, tz, next])?;
        }
        None => {
            conn.prepare_cached("DELETE FROM schedules WHERE job_id = ?1")?
                .execute([&spec.id])?;
        }
    }
    Ok(())
}

/// Reads a row of `schedules` (`job_id, spec, timezone, next_tick, last_tick`).
fn schedule_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<crate::store::schedules::ScheduleRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

impl SqliteStore {
    /// Stores a job definition and its schedule (see [`crate::store::Store::job_define_at`]).
    pub async fn job_define(&self, spec: JobSpec, now: i64) -> Result<()> {
        self.write(move |ctx| {
            if job_put(ctx.conn, &spec, None, chrono::Utc::now().timestamp_millis())? {
                schedule_sync(ctx.conn, &spec, now)?;
            }
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::schedules_fire_due`]: one writer operation, so the tick's
    /// event and the schedule's move commit together.
    pub async fn schedules_fire_due(&self, now: i64, limit: usize) -> Result<usize> {
        self.write(move |ctx| {
            let due: Vec<_> = ctx
                .conn
                .prepare_cached(
                    "SELECT job_id, spec, timezone, next_tick, last_tick FROM schedules \
                     WHERE next_tick <= ?1 ORDER BY next_tick LIMIT ?2",
                )?
                .query_map(params![now, limit as i64], schedule_row)?
                .collect::<rusqlite::Result<_>>()?;
            for (job, text, tz, due_at, last) in &due {
                let schedule = match crate::schedule::Schedule::from_stored(text, tz.as_deref()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(job = %job, error = %e, "dropping a stored schedule that no longer reads");
                        ctx.conn.prepare_cached("DELETE FROM schedules WHERE job_id = ?1")?.execute([job])?;
                        continue;
                    }
                };
                let (tick, next) = crate::store::schedules::tick_due(&schedule, *due_at, now);
                let ev = crate::store::schedules::tick_event(job, tick, *last, now);
                insert_event(ctx, &ev, &ev.payload.to_string(), None)?;
                match next {
                    Some(next) => ctx.conn.prepare_cached(
                        "UPDATE schedules SET next_tick = ?2, last_tick = ?3 WHERE job_id = ?1",
                    )?.execute(params![job, next, tick])?,
                    None => ctx.conn.prepare_cached("DELETE FROM schedules WHERE job_id = ?1")?.execute([job])?,
                };
            }
            Ok(due.len())
        })
        .await
    }

    /// See [`crate::store::Store::schedules_list`].
    pub async fn schedules_list(&self) -> Result<Vec<crate::store::ScheduleState>> {
        self.read(|c| {
            let rows: Vec<_> = c
                .prepare_cached(
                    "SELECT job_id, spec, timezone, next_tick, last_tick FROM schedules ORDER BY job_id",
                )?
                .query_map([], schedule_row)?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows
                .into_iter()
                .filter_map(|(job_id, text, tz, next_tick, last_tick)| {
                    let schedule = crate::schedule::Schedule::from_stored(&text, tz.as_deref()).ok()?;
                    Some(crate::store::ScheduleState { job_id, schedule, next_tick, last_tick })
                })
                .collect())
        })
        .await
    }

    /// See [`crate::store::Store::event_insert`].
    pub async fn event_insert(&self, ev: NewEvent) -> Result<Inserted> {
        // Serialize on the caller's task, not on the writer thread.
        let payload_text = ev.payload.to_string();
        let context_text = ev.context.as_ref().map(Value::to_string);
        // No savepoint: once the event row is written, only database errors can follow.
        self.write_guarded(Guard::Batch, move |ctx| {
            insert_event(ctx, &ev, &payload_text, context_text.as_deref())
        })
        .await
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
        self.write(move |ctx| {
            events
                .iter()
                .zip(&texts)
                .map(|(ev, (payload, context))| insert_event(ctx, ev, payload, context.as_deref()))
                .collect()
        })
        .await
    }

    /// See [`crate::store::Store::event_cancel`].
    pub async fn event_cancel(&self, id: String, now: i64) -> Result<StoredEvent> {
        self.write(move |ctx| {
            let n = ctx
                .conn
                .prepare_cached(
                    "UPDATE events SET cancelled_at = ?2 WHERE id = ?1 AND delivered_at IS NULL AND cancelled_at IS NULL",
                )?
                .execute(params![id, now])?;
            let event = event_by_id(ctx.conn, &id)?.ok_or_else(|| Error::NotFound {
                what: "event",
                id: id.clone(),
            })?;
            if n == 0 {
                let why = if event.cancelled_at.is_some() {
                    "it was already cancelled"
                } else {
                    "it was already delivered"
                };
                return Err(Error::Conflict(format!("event {id:?} cannot be cancelled: {why}")));
            }
            Ok(event)
        })
        .await
    }

    /// See [`crate::store::Store::events_deliver_due`].
    pub async fn events_deliver_due(&self, now: i64, limit: usize) -> Result<usize> {
        self.write(move |ctx| {
            let due: Vec<(String, String, String)> = ctx
                .conn
                .prepare_cached(
                    "SELECT id, name, payload FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL \
                     AND deliver_at <= ?1 ORDER BY deliver_at LIMIT ?2",
                )?
                .query_map(params![now, limit as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (id, name, payload) in &due {
                let payload = json_text(payload)?;
                fanout(ctx, id, name, &payload, now)?;
                ctx.conn
                    .prepare_cached("UPDATE events SET delivered_at = ?2 WHERE id = ?1")?
                    .execute(params![id, now])?;
            }
            Ok(due.len())
        })
        .await
    }

    /// See [`crate::store::Store::runs_claim`].
    pub async fn runs_claim(&self, p: ClaimParams) -> Result<Vec<ClaimedRun>> {
        let token: i64 = rand::random::<i64>() & i64::MAX;
        let groups: Vec<(String, usize)> = p
            .groups
            .iter()
            .filter(|g| g.limit > 0 && !g.jobs.is_empty())
            .map(|g| (serde_json::to_string(&g.jobs).unwrap_or_default(), g.limit))
            .collect();
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        type Row = (i64, String, String, String, u32, u32, String, String);
        let now = p.now;
        // Committed without waiting for the disk: see `Commit::Lazy`.
        let claimed: Vec<Row> = self.write_synced(Guard::Savepoint, Commit::Lazy, move |ctx| {
            let mut claimed = Vec::new();
            for (jobs, limit) in &groups {
                let rows: Vec<Row> = ctx
                    .conn
                    .prepare_cached(CLAIM_SELECT)?
                    .query_map(params![p.now, jobs, *limit as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                let mut take = ctx.conn.prepare_cached(
                    "UPDATE runs SET status = 'running', attempt = attempt + 1, started_at = ?2, lease_until = ?3, lease_token = ?4, node = ?5 \
                     WHERE seq = ?1",
                )?;
                for row in rows {
                    take.execute(params![row.0, p.now, p.lease_until, token, p.node])?;
                    claimed.push(row);
                }
            }
            Ok(claimed)
        })
        .await?;
        // The payloads are parsed here, on the caller's task, not on the writer thread.
        claimed
            .into_iter()
            .map(
                |(_, id, event_id, job_id, attempt, max_attempts, event_name, payload)| {
                    Ok(ClaimedRun {
                        id,
                        event_id,
                        event_name,
                        job_id,
                        attempt,
                        max_attempts,
                        token,
                        payload: json_text(&payload)?,
                        started_at: now,
                    })
                },
            )
            .collect()
    }

    /// See [`crate::store::Store::runs_complete`].
    pub async fn runs_complete(&self, completions: Vec<Completion>) -> Result<Vec<bool>> {
        // No savepoint: every failure here is a database error.
        self.write_guarded(Guard::Batch, move |ctx| {
            let mut held = Vec::with_capacity(completions.len());
            for c in &completions {
                // Whether the lease still held (the run was written), and the job of a run that
                // reached a final state, for the per-minute counts.
                let (outcome, held_lease, finished, error): (_, bool, Option<&str>, _) = match &c.finish {
                    Finish::Succeeded(output) => final_outcome("succeeded", ctx.conn.prepare_cached(
                        "UPDATE runs SET status = 'succeeded', finished_at = ?3, output = ?4, error = NULL, lease_until = NULL, lease_token = NULL \
                         WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
                    )?.execute(params![c.run_id, c.token, c.finished_at, output.to_string()])?, &c.job_id, None),
                    Finish::Retry { error, at } => {
                        ctx.wake = true;
                        let n = ctx.conn.prepare_cached(
                            "UPDATE runs SET status = 'queued', run_at = ?3, error = ?4, lease_until = NULL, lease_token = NULL \
                             WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
                        )?.execute(params![c.run_id, c.token, at, error])?;
                        ("retrying", n == 1, None, Some(error.as_str()))
                    }
                    Finish::Failed(error) => final_outcome("failed", ctx.conn.prepare_cached(
                        "UPDATE runs SET status = 'failed', finished_at = ?3, error = ?4, lease_until = NULL, lease_token = NULL \
                         WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
                    )?.execute(params![c.run_id, c.token, c.finished_at, error])?, &c.job_id, Some(error.as_str())),
                    Finish::Wait { key, until, since } => {
                        // Back to the queue, due when the wait is; the attempt does not count.
                        let n = ctx.conn.prepare_cached(
                            "UPDATE runs SET status = 'queued', attempt = attempt - 1, run_at = ?3, lease_until = NULL, lease_token = NULL \
                             WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
                        )?.execute(params![c.run_id, c.token, until])?;
                        if n == 1 {
                            ctx.wake = true;
                            ctx.conn.prepare_cached(super::steps::STEP_UPSERT)?.execute(params![
                                c.run_id, key, StepKind::Wait.as_str(), StepStatus::Waiting.as_str(),
                                c.attempt, since, None::<i64>, until, None::<String>, None::<String>
                            ])?;
                        }
                        ("waiting", n == 1, None, None)
                    }
                };
                let ok = held_lease;
                if let Some(job) = finished {
                    ctx.tally.run(c.finished_at, job, outcome, 1);
                }
                if ok {
                    // A success's attempt is the run row itself (see `RunDetail::new`).
                    if !matches!(c.finish, Finish::Succeeded(_)) {
                        record_attempt(ctx.conn, &c.run_id, c.attempt, outcome, Some(c.started_at), c.finished_at, error)?;
                    }
                    let mut log = ctx.conn.prepare_cached(
                        "INSERT INTO run_logs (run_id, attempt, level, message, fields, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?;
                    for line in &c.logs {
                        log.execute(params![
                            c.run_id,
                            line.attempt,
                            line.level.as_str(),
                            line.message,
                            line.fields.as_ref().map(Value::to_string),
                            line.at.timestamp_millis()
                        ])?;
                    }
                }
                held.push(ok);
            }
            Ok(held)
        })
        .await
    }

    /// See [`crate::store::Store::runs_heartbeat`].
    pub async fn runs_heartbeat(
        &self,
        leases: Vec<Lease>,
        lease_until: i64,
    ) -> Result<Vec<String>> {
        self.write(move |ctx| {
            let mut stmt = ctx.conn.prepare_cached(
                "UPDATE runs SET lease_until = ?3 WHERE id = ?1 AND lease_token = ?2 AND status = 'running'",
            )?;
            let mut lost = Vec::new();
            for l in &leases {
                if stmt.execute(params![l.run_id, l.token, lease_until])? == 0 {
                    lost.push(l.run_id.clone());
                }
            }
            Ok(lost)
        })
        .await
    }

    /// See [`crate::store::Store::runs_release`].
    pub async fn runs_release(&self, leases: Vec<Lease>, now: i64) -> Result<usize> {
        self.write(move |ctx| {
            let mut n = 0;
            for l in &leases {
                let released: Option<(u32, Option<i64>)> = ctx
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET status = 'queued', attempt = attempt - 1, run_at = ?3, lease_until = NULL, lease_token = NULL \
                         WHERE id = ?1 AND lease_token = ?2 AND status = 'running' RETURNING attempt + 1, started_at",
                    )?
                    .query_row(params![l.run_id, l.token, now], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                if let Some((attempt, started)) = released {
                    record_attempt(ctx.conn, &l.run_id, attempt, "released", started, now, Some("released at shutdown before it finished"))?;
                    n += 1;
                }
            }
            if n > 0 {
                ctx.wake = true;
            }
            Ok(n)
        })
        .await
    }

    /// See [`crate::store::Store::runs_rescue`].
    pub async fn runs_rescue(&self, now: i64) -> Result<usize> {
        self.write(move |ctx| {
            /// A rescued run: id, attempt, start, error, job, and when it failed (no attempt left).
            type Rescued = (String, u32, Option<i64>, String, String, Option<i64>);
            let rescued: Vec<Rescued> = ctx
                .conn
                .prepare_cached(
                    "UPDATE runs SET \
                       status = CASE WHEN attempt < max_attempts THEN 'queued' ELSE 'failed' END, \
                       finished_at = CASE WHEN attempt < max_attempts THEN NULL ELSE ?1 END, \
                       run_at = ?1, lease_until = NULL, lease_token = NULL, \
                       error = 'lease expired: the worker running attempt ' || attempt || ' stopped responding' \
                     WHERE seq IN (SELECT seq FROM runs WHERE status = 'running' AND lease_until < ?1 LIMIT 1000) \
                     RETURNING id, attempt, started_at, error, job_id, finished_at",
                )?
                .query_map([now], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            for (id, attempt, started, error, job, finished) in &rescued {
                record_attempt(ctx.conn, id, *attempt, "lost", *started, now, Some(error))?;
                if let Some(at) = finished {
                    ctx.tally.run(*at, job, "failed", 1);
                }
            }
            if !rescued.is_empty() {
                ctx.wake = true;
            }
            Ok(rescued.len())
        })
        .await
    }

    /// See [`crate::store::Store::run_cancel`].
    pub async fn run_cancel(&self, id: String, now: i64) -> Result<()> {
        self.write(move |ctx| run_cancel_one(ctx, &id, now)).await
    }

    /// See [`crate::store::Store::job_pause`].
    pub async fn job_pause(&self, id: String, paused: bool) -> Result<()> {
        self.write(move |ctx| {
            let n = ctx
                .conn
                .prepare_cached("UPDATE jobs SET paused = ?2 WHERE id = ?1")?
                .execute(params![id, paused])?;
            if n == 0 {
                return Err(Error::NotFound { what: "job", id });
            }
            ctx.wake = !paused; // its due runs can be claimed now
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::run_retry`].
    pub async fn run_retry(&self, id: String, now: i64) -> Result<()> {
        self.write(move |ctx| run_retry_one(ctx, &id, now)).await
    }

    /// See [`crate::store::Store::runs_bulk`].
    pub async fn runs_bulk(
        &self,
        action: crate::store::BulkRunAction,
        ids: Vec<String>,
        now: i64,
    ) -> Result<usize> {
        self.write(move |ctx| {
            let mut n = 0;
            for id in &ids {
                // A run in another state (or gone) is skipped; both checks write nothing then.
                let done = match action {
                    crate::store::BulkRunAction::Cancel => run_cancel_one(ctx, id, now),
                    crate::store::BulkRunAction::Retry => run_retry_one(ctx, id, now),
                };
                match done {
                    Ok(()) => n += 1,
                    Err(Error::Conflict(_) | Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        })
        .await
    }

    /// See [`crate::store::Store::leader_acquire`].
    pub async fn leader_acquire(
        &self,
        name: String,
        holder: String,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool> {
        self.write(move |ctx| {
            let held = ctx
                .conn
                .prepare_cached(
                    "INSERT INTO leaders (name, holder, expires_at) VALUES (?1, ?2, ?3 + ?4) \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
                     WHERE leaders.holder = excluded.holder OR leaders.expires_at <= ?3 RETURNING holder",
                )?
                .query_row(params![name, holder, now, ttl_ms], |r| r.get::<_, String>(0))
                .optional()?;
            Ok(held.is_some())
        })
        .await
    }

    /// See [`crate::store::Store::leader_release`].
    pub async fn leader_release(&self, name: String, holder: String) -> Result<()> {
        self.write(move |ctx| {
            ctx.conn
                .prepare_cached("DELETE FROM leaders WHERE name = ?1 AND holder = ?2")?
                .execute(params![name, holder])?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::prune`].
    pub async fn events_prune(&self, before: i64, limit: usize) -> Result<usize> {
        self.write(move |ctx| {
            let ids: Vec<String> = ctx
                .conn
                .prepare_cached(
                    "SELECT e.id FROM events e WHERE e.timestamp < ?1 \
                       AND (e.delivered_at IS NOT NULL OR e.cancelled_at IS NOT NULL) \
                       AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.event_id = e.id AND r.status IN ('queued', 'running')) \
                     ORDER BY e.timestamp LIMIT ?2",
                )?
                .query_map(params![before, limit as i64], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if ids.is_empty() {
                return Ok(0);
            }
            let list = serde_json::to_string(&ids).unwrap_or_default();
            // What the deleted rows counted as in the per-minute counts.
            let runs: Vec<(i64, String, String, i64)> = ctx
                .conn
                .prepare_cached(
                    "SELECT finished_at / 60000 * 60000, job_id, status, count(*) FROM runs \
                     WHERE event_id IN (SELECT value FROM json_each(?1)) AND finished_at IS NOT NULL \
                     GROUP BY 1, 2, 3",
                )?
                .query_map([&list], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (at, job, status, n) in runs {
                ctx.tally.run(at, &job, &status, -n);
            }
            let events: Vec<(i64, i64)> = ctx
                .conn
                .prepare_cached(
                    "SELECT timestamp / 60000 * 60000, count(*) FROM events \
                     WHERE id IN (SELECT value FROM json_each(?1)) GROUP BY 1",
                )?
                .query_map([&list], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (at, n) in events {
                ctx.tally.events(at, -n);
            }
            ctx.conn.execute(
                "DELETE FROM run_logs WHERE run_id IN (SELECT id FROM runs WHERE event_id IN (SELECT value FROM json_each(?1)))",
                [&list],
            )?;
            ctx.conn.execute(
                "DELETE FROM run_attempts WHERE run_id IN (SELECT id FROM runs WHERE event_id IN (SELECT value FROM json_each(?1)))",
                [&list],
            )?;
            ctx.conn.execute(
                "DELETE FROM run_steps WHERE run_id IN (SELECT id FROM runs WHERE event_id IN (SELECT value FROM json_each(?1)))",
                [&list],
            )?;
            ctx.conn.execute("DELETE FROM runs WHERE event_id IN (SELECT value FROM json_each(?1))", [&list])?;
            super::search::forget(ctx.conn, &list)?;
            ctx.conn.execute("DELETE FROM events WHERE id IN (SELECT value FROM json_each(?1))", [&list])?;
            Ok(ids.len())
        })
        .await
    }
}

/// Cancels one queued or running run inside the caller's write: final and counted, its lease
/// removed, so the completion of an attempt still executing no longer matches (fencing) and is
/// refused. A running run's attempt is recorded as `cancelled`.
pub(super) fn run_cancel_one(ctx: &mut WriteCtx<'_>, id: &str, now: i64) -> Result<()> {
    // Read before the write (RETURNING shows the new row): whether an attempt is executing.
    let found: Option<(String, String, u32, Option<i64>)> = ctx
        .conn
        .prepare_cached("SELECT status, job_id, attempt, started_at FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let Some((status, job, attempt, started)) = found else {
        return run_state_error(ctx.conn, id, "cancelled", "");
    };
    if status != "queued" && status != "running" {
        return run_state_error(
            ctx.conn,
            id,
            "cancelled",
            "only a queued or running run can be cancelled",
        );
    }
    ctx.conn
        .prepare_cached(
            "UPDATE runs SET status = 'cancelled', finished_at = ?2, lease_until = NULL, lease_token = NULL WHERE id = ?1",
        )?
        .execute(params![id, now])?;
    ctx.tally.run(now, &job, "cancelled", 1);
    if status == "running" {
        record_attempt(
            ctx.conn,
            id,
            attempt,
            "cancelled",
            started,
            now,
            Some("cancelled while running"),
        )?;
    }
    Ok(())
}

/// Queues failed or cancelled run `id` again inside the caller's write (see `run_retry`); a run
/// in another state is a conflict, and nothing is written then.
pub(super) fn run_retry_one(ctx: &mut WriteCtx<'_>, id: &str, now: i64) -> Result<()> {
    // What the run counted as in the per-minute counts, which it leaves.
    let finished: Option<(i64, String, String)> = ctx
        .conn
        .prepare_cached(
            "SELECT finished_at, job_id, status FROM runs \
             WHERE id = ?1 AND status IN ('failed', 'cancelled') AND finished_at IS NOT NULL",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let n = ctx
        .conn
        .prepare_cached(
            "UPDATE runs SET status = 'queued', run_at = ?2, finished_at = NULL, max_attempts = MAX(max_attempts, attempt + 1) \
             WHERE id = ?1 AND status IN ('failed', 'cancelled')",
        )?
        .execute(params![id, now])?;
    if n == 1 {
        if let Some((at, job, status)) = finished {
            ctx.tally.run(at, &job, &status, -1);
        }
        ctx.wake = true;
        return Ok(());
    }
    run_state_error(
        ctx.conn,
        id,
        "retried",
        "only a failed or cancelled run can be retried",
    )
}

fn run_state_error<T>(conn: &Connection, id: &str, verb: &str, rule: &str) -> Result<T> {
    let status: Option<String> = conn
        .query_row("SELECT status FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .optional()?;
    match status {
        None => Err(Error::NotFound {
            what: "run",
            id: id.to_string(),
        }),
        Some(s) => Err(Error::Conflict(format!(
            "run {id:?} cannot be {verb}: it is {s}; {rule}"
        ))),
    }
}
