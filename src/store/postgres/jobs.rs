//! Jobs on PostgreSQL: storing a definition with its schedule in one transaction, pausing,
//! firing due schedules (`FOR UPDATE SKIP LOCKED`, each tick's event through the ordinary
//! insert), listing schedules, and which endpoint owns each job.

use deadpool_postgres::GenericClient;

use super::rows::{exec, rows, schedule_row, triggers_refresh};
use super::writer::{insert_events, EventRow};
use super::PgStore;
use crate::model::JobSpec;
use crate::store::owners::{
    displaced_note, owner_change, JobOwner, OwnerChange, Put, TAKE_OVER_NOTE,
};
use crate::store::{Error, Result};

/// Stores a job definition, of `endpoint`'s index or (`None`) defined in code, under the rule of
/// [`crate::store::owners`] (the stored row locked while deciding): another endpoint's job is
/// refused; code displaces an endpoint's job (the endpoint's row is touched so every node's
/// registry stops running it), noted on the job.
pub(super) async fn job_put<C: GenericClient>(
    c: &C,
    spec: &JobSpec,
    endpoint: Option<&str>,
    now: i64,
) -> Result<Put> {
    let stored: Option<Option<String>> = rows(
        c,
        "SELECT endpoint_id FROM jobs WHERE id = $1 FOR UPDATE",
        &[&spec.id],
    )
    .await?
    .first()
    .map(|r| r.try_get(0))
    .transpose()?;
    let change = owner_change(stored.as_ref().map(Option::as_deref), endpoint);
    if change == OwnerChange::Refuse {
        return Ok(Put::Refused);
    }
    let filter = spec.filter.as_ref().map(|f| f.as_json().to_string());
    let max_attempts = i32::try_from(spec.retry.max_attempts).unwrap_or(i32::MAX);
    let timeout = i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX);
    let concurrency = spec
        .concurrency
        .job_limit()
        .map(|c| i32::try_from(c).unwrap_or(i32::MAX));
    let limits = spec.concurrency.to_json().map(|v| v.to_string());
    let rate = spec.rate_limit.as_ref().map(|r| r.to_json().to_string());
    let throttle = spec.throttle.as_ref().map(|t| t.to_json().to_string());
    let start_timeout = spec
        .start_timeout
        .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
    let debounce = spec.debounce.as_ref().map(|d| d.to_json().to_string());
    let priority = spec.priority.as_ref().map(|p| p.source().to_string());
    // An endpoint's definition still never overwrites another endpoint's row that a concurrent
    // transaction inserted after the check above.
    let n = exec(
        c,
        "INSERT INTO jobs (id, name, version, event, filter, max_attempts, timeout_ms, concurrency, updated_at, endpoint_id, concurrency_limits, rate_limit, throttle, start_timeout_ms, debounce, priority) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, version = excluded.version, event = excluded.event, \
         filter = excluded.filter, max_attempts = excluded.max_attempts, timeout_ms = excluded.timeout_ms, \
         concurrency = excluded.concurrency, concurrency_limits = excluded.concurrency_limits, rate_limit = excluded.rate_limit, throttle = excluded.throttle, start_timeout_ms = excluded.start_timeout_ms, debounce = excluded.debounce, priority = excluded.priority, updated_at = GREATEST(excluded.updated_at, jobs.updated_at + 1), \
         endpoint_id = excluded.endpoint_id \
         WHERE excluded.endpoint_id IS NULL OR jobs.endpoint_id IS NULL OR jobs.endpoint_id = excluded.endpoint_id",
        &[&spec.id, &spec.name, &spec.version, &spec.event, &filter, &max_attempts, &timeout, &concurrency, &now, &endpoint, &limits, &rate, &throttle, &start_timeout, &debounce, &priority],
    )
    .await?;
    if n != 1 {
        return Ok(Put::Refused);
    }
    exec(
        c,
        "UPDATE jobs SET cancel_on = $2 WHERE id = $1",
        &[&spec.id, &crate::store::jobs::cancel_on_text(spec)],
    )
    .await?;
    let (note, put) = match change {
        OwnerChange::Displace(old) => {
            let url: Option<String> = rows(
                c,
                "UPDATE endpoints SET updated_at = GREATEST($2, updated_at + 1) WHERE id = $1 \
                 RETURNING url",
                &[&old, &now],
            )
            .await?
            .first()
            .map(|r| r.try_get(0))
            .transpose()?;
            let url = url.unwrap_or(old);
            (displaced_note(&url), Put::Displaced(url))
        }
        OwnerChange::TakeOver => (TAKE_OVER_NOTE.to_string(), Put::Stored),
        OwnerChange::Keep | OwnerChange::Refuse => return Ok(Put::Stored),
    };
    exec(
        c,
        "UPDATE jobs SET owner_note = $2, owner_noted_at = $3 WHERE id = $1",
        &[&spec.id, &note, &now],
    )
    .await?;
    Ok(put)
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

impl PgStore {
    /// Stores a job definition and its schedule in one transaction (see
    /// [`crate::store::Store::job_define_at`]).
    pub(crate) async fn job_define(&self, spec: JobSpec, now: i64) -> Result<Put> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let put = job_put(&tx, &spec, None, now).await?;
        if put != Put::Refused {
            schedule_sync(&tx, &spec, now).await?;
        }
        tx.commit().await?;
        Ok(put)
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

    /// See [`crate::store::Store::job_pause`].
    pub async fn job_pause(&self, id: String, paused: bool) -> Result<()> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let n = tx
            .execute("UPDATE jobs SET paused = $2 WHERE id = $1", &[&id, &paused])
            .await?;
        if n == 0 {
            return Err(Error::NotFound { what: "job", id });
        }
        tx.commit().await?;
        if !paused {
            self.wake();
        }
        Ok(())
    }

    /// See [`crate::store::Store::jobs_pause_all`].
    pub async fn jobs_pause_all(&self) -> Result<u64> {
        let client = self.conn().await?;
        let paused = self
            .write_one(
                &client,
                "UPDATE jobs SET paused = true WHERE NOT paused RETURNING id",
                &[],
            )
            .await?;
        Ok(paused.len() as u64)
    }

    /// Each stored job with its endpoint, if any, and the note of its last change of owner.
    pub(crate) async fn job_owners(&self) -> Result<Vec<JobOwner>> {
        let client = self.conn().await?;
        rows(
            &client,
            "SELECT id, endpoint_id, owner_note, owner_noted_at FROM jobs ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            let note: Option<String> = r.try_get(2)?;
            let at: Option<i64> = r.try_get(3)?;
            Ok(JobOwner {
                job: r.try_get(0)?,
                endpoint: r.try_get(1)?,
                note: note.zip(at),
            })
        })
        .collect()
    }
}
