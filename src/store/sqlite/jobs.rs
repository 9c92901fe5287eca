//! Jobs on SQLite: storing a definition with its schedule in one operation, pausing, firing due
//! schedules (each tick's event through the ordinary insert), listing schedules, and which
//! endpoint owns each job.

use rusqlite::{params, Connection, OptionalExtension};

use super::events::insert_event;
use super::rows::schedule_row;
use super::SqliteStore;
use crate::model::JobSpec;
use crate::store::owners::{
    displaced_note, owner_change, JobOwner, OwnerChange, Put, TAKE_OVER_NOTE,
};
use crate::store::{Error, Result};

/// Stores a job definition, of `endpoint`'s index or (`None`) defined in code, under the rule of
/// [`crate::store::owners`]: another endpoint's job is refused; code displaces an endpoint's job
/// (the endpoint's row is touched so every node's registry stops running it), noted on the job.
pub(super) fn job_put(
    conn: &Connection,
    spec: &JobSpec,
    endpoint: Option<&str>,
    now: i64,
) -> Result<Put> {
    let stored: Option<Option<String>> = conn
        .prepare_cached("SELECT endpoint_id FROM jobs WHERE id = ?1")?
        .query_row([&spec.id], |r| r.get(0))
        .optional()?;
    let change = owner_change(stored.as_ref().map(Option::as_deref), endpoint);
    let filter = spec.filter.as_ref().map(|f| f.as_json().to_string());
    if change == OwnerChange::Refuse {
        return Ok(Put::Refused);
    }
    conn.prepare_cached(
        "INSERT INTO jobs (id, name, version, event, filter, max_attempts, timeout_ms, concurrency, updated_at, endpoint_id, concurrency_limits, rate_limit, throttle, start_timeout_ms, debounce, priority) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, version = excluded.version, event = excluded.event, \
         filter = excluded.filter, max_attempts = excluded.max_attempts, timeout_ms = excluded.timeout_ms, \
         concurrency = excluded.concurrency, concurrency_limits = excluded.concurrency_limits, rate_limit = excluded.rate_limit, throttle = excluded.throttle, start_timeout_ms = excluded.start_timeout_ms, debounce = excluded.debounce, priority = excluded.priority, updated_at = max(excluded.updated_at, jobs.updated_at + 1), \
         endpoint_id = excluded.endpoint_id",
    )?
    .execute(params![
        spec.id,
        spec.name,
        spec.version,
        spec.event,
        filter,
        spec.retry.max_attempts,
        i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX),
        spec.concurrency.job_limit(),
        now,
        endpoint,
        spec.concurrency.to_json().map(|v| v.to_string()),
        spec.rate_limit.as_ref().map(|r| r.to_json().to_string()),
        spec.throttle.as_ref().map(|t| t.to_json().to_string()),
        spec.start_timeout.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
        spec.debounce.as_ref().map(|d| d.to_json().to_string()),
        spec.priority.as_ref().map(|p| p.source())
    ])?;
    conn.prepare_cached("UPDATE jobs SET cancel_on = ?2 WHERE id = ?1")?
        .execute(params![spec.id, crate::store::jobs::cancel_on_text(spec)])?;
    let (note, put) = match change {
        OwnerChange::Displace(old) => {
            let url: String = conn
                .prepare_cached(
                    "UPDATE endpoints SET updated_at = max(?2, updated_at + 1) WHERE id = ?1 \
                     RETURNING url",
                )?
                .query_row(params![old, now], |r| r.get(0))
                .optional()?
                .unwrap_or(old);
            (displaced_note(&url), Put::Displaced(url))
        }
        OwnerChange::TakeOver => (TAKE_OVER_NOTE.to_string(), Put::Stored),
        OwnerChange::Keep | OwnerChange::Refuse => return Ok(Put::Stored),
    };
    conn.prepare_cached("UPDATE jobs SET owner_note = ?2, owner_noted_at = ?3 WHERE id = ?1")?
        .execute(params![spec.id, note, now])?;
    Ok(put)
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

impl SqliteStore {
    /// Stores a job definition and its schedule (see [`crate::store::Store::job_define_at`]).
    pub(crate) async fn job_define(&self, spec: JobSpec, now: i64) -> Result<Put> {
        self.write(move |ctx| {
            let put = job_put(ctx.conn, &spec, None, now)?;
            if put != Put::Refused {
                schedule_sync(ctx.conn, &spec, now)?;
            }
            Ok(put)
        })
        .await
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

    /// See [`crate::store::Store::jobs_pause_all`].
    pub async fn jobs_pause_all(&self) -> Result<u64> {
        self.write(|ctx| {
            Ok(ctx
                .conn
                .prepare_cached("UPDATE jobs SET paused = 1 WHERE paused = 0")?
                .execute([])? as u64)
        })
        .await
    }

    /// Each stored job with its endpoint, if any, and the note of its last change of owner.
    pub(crate) async fn job_owners(&self) -> Result<Vec<JobOwner>> {
        self.read(|c| {
            Ok(c.prepare_cached(
                "SELECT id, endpoint_id, owner_note, owner_noted_at FROM jobs ORDER BY id",
            )?
            .query_map([], |r| {
                let note: Option<String> = r.get(2)?;
                let at: Option<i64> = r.get(3)?;
                Ok(JobOwner {
                    job: r.get(0)?,
                    endpoint: r.get(1)?,
                    note: note.zip(at),
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
        })
        .await
    }
}
