//! Events on SQLite: the insert with its fan-out (one run per matching job, in the same
//! operation of the writer), cancelling a scheduled event, delivering due ones, pruning finished
//! ones with their runs, and reading an event with its runs and children.

use rusqlite::params;

use super::rows::{
    event_by_id, event_from_row, json_text, run_from_row, EVENT_COLUMNS, RUN_COLUMNS,
};
use super::writer::{Guard, WriteCtx};
use super::SqliteStore;
use crate::model::{EventFields, StoredEvent};
use crate::store::events::Skipped;
use crate::store::links::Effect;
use crate::store::{Error, EventDetail, Inserted, NewEvent, Result};

/// Creates one queued run per matching job, with the slots of a job's concurrency limits
/// (their rows in `flow_slots` created or given the definition's capacity, the job's own slot
/// marked due); a debounced job's event joins its key's open window. Returns the run ids.
pub(super) fn fanout(
    ctx: &mut WriteCtx<'_>,
    event: &EventFields<'_>,
    now: i64,
) -> Result<Vec<String>> {
    let jobs = ctx.triggers.matching(event.name, event.payload);
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids = Vec::with_capacity(jobs.len());
    for job in jobs {
        let run = match &job.debounce {
            Some(d) => super::debounce::run_take(ctx.conn, &job, d, event, now)?,
            None => super::flow::run_insert(ctx.conn, &job, event, now)?,
        };
        ids.extend(run);
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
        cancel_matched(ctx, &ev.id, &ev.name, &ev.payload, ev.now)?;
        if super::waits::on_event(ctx, &ev.id, &ev.name, &ev.payload, ev.now, ev.now)? > 0 {
            ctx.wake = true;
        }
        let fields = EventFields {
            id: &ev.id,
            name: &ev.name,
            payload: &ev.payload,
            context: ev.context.as_ref(),
            source: &ev.source,
        };
        fanout(ctx, &fields, ev.now)?
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

/// Cancels the runs that the event `id` just delivered at `now` cancels (their job's
/// `cancel_on`), before it starts runs of its own; returns how many.
fn cancel_matched(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    name: &str,
    payload: &serde_json::Value,
    now: i64,
) -> Result<usize> {
    let runs = super::cancel_on::matched(ctx, id, name, payload, now)?;
    if runs.is_empty() {
        return Ok(0);
    }
    let reason = crate::model::cancel::cancelled_by_event(name, id);
    let mut n = 0;
    for run in runs {
        n += cancel_runs(ctx, &run, now, Some(&reason), Some(id))?;
    }
    Ok(n)
}

/// Cancels run `id` (its error set to `reason` when given) and its unfinished invoked runs
/// inside the caller's write, each with its `flare/run.cancelled`, linked to the event `by`
/// that cancelled them if one did; returns how many (0: `id` was not queued or running, and
/// nothing was written).
pub(super) fn cancel_runs(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    now: i64,
    reason: Option<&str>,
    by: Option<&str>,
) -> Result<usize> {
    let cancelled = super::cancel::tree(ctx, id, now, reason)?;
    for run in &cancelled {
        if let Some(event) = by {
            super::links::effect_put(ctx.conn, event, run, Effect::Cancelled, now)?;
        }
        let why = if run == id { reason } else { None };
        send_ended(ctx, run, true, why, now)?;
    }
    Ok(cancelled.len())
}

/// Sends the event of run `run_id`, just made failed (`error`) or cancelled, in the caller's
/// write (`flare/run.failed`, `flare/run.cancelled`; none for a run of a `flare/…` event).
pub(super) fn send_ended(
    ctx: &mut WriteCtx<'_>,
    run_id: &str,
    cancelled: bool,
    error: Option<&str>,
    now: i64,
) -> Result<()> {
    if let Some(event) = super::ended::ended_event(ctx.conn, run_id, cancelled, error, now)? {
        let (payload, context) = event.texts();
        insert_event(ctx, &event, &payload, context.as_deref())?;
    }
    Ok(())
}

impl SqliteStore {
    /// See [`crate::store::Store::event_insert`].
    pub async fn event_insert(&self, ev: NewEvent) -> Result<Inserted> {
        // Serialize on the caller's task, not on the writer thread.
        let (payload_text, context_text) = ev.texts();
        // No savepoint: once the event row is written, only database errors can follow.
        self.write_guarded(Guard::Batch, move |ctx| {
            insert_event(ctx, &ev, &payload_text, context_text.as_deref())
        })
        .await
    }

    /// See [`crate::store::Store::event_insert_many`].
    pub async fn event_insert_many(&self, events: Vec<NewEvent>) -> Result<Vec<Inserted>> {
        let texts: Vec<(String, Option<String>)> = events.iter().map(NewEvent::texts).collect();
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
            type Due = (String, String, String, Option<String>, String);
            let due: Vec<Due> = ctx
                .conn
                .prepare_cached(
                    "SELECT id, name, payload, context, source FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL \
                     AND deliver_at <= ?1 ORDER BY deliver_at LIMIT ?2",
                )?
                .query_map(params![now, limit as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            for (id, name, payload, context, source) in &due {
                let payload = json_text(payload)?;
                let context = context.as_deref().map(json_text).transpose()?;
                let fields = EventFields {
                    id,
                    name,
                    payload: &payload,
                    context: context.as_ref(),
                    source,
                };
                cancel_matched(ctx, id, name, &payload, now)?;
                fanout(ctx, &fields, now)?;
                if super::waits::on_event(ctx, id, name, &payload, now, now)? > 0 {
                    ctx.wake = true;
                }
                ctx.conn
                    .prepare_cached("UPDATE events SET delivered_at = ?2 WHERE id = ?1")?
                    .execute(params![id, now])?;
            }
            Ok(due.len())
        })
        .await
    }

    /// See [`crate::store::Store::events_prune`].
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
            // Invoked runs going while their callers may still read them: the callers' steps
            // keep their outcomes.
            let children: Vec<String> = ctx
                .conn
                .prepare_cached(
                    "SELECT id FROM runs WHERE event_id IN (SELECT value FROM json_each(?1)) \
                     AND awaited_by IS NOT NULL",
                )?
                .query_map([&list], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            for child in &children {
                super::children::caller_keeps_outcome(ctx.conn, child)?;
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
            ctx.conn.execute(
                "DELETE FROM run_waits WHERE run_id IN (SELECT id FROM runs WHERE event_id IN (SELECT value FROM json_each(?1)))",
                [&list],
            )?;
            for table in ["run_cancel_keys", "event_effects", "children_waiting"] {
                ctx.conn.execute(
                    &format!("DELETE FROM {table} WHERE run_id IN (SELECT id FROM runs WHERE event_id IN (SELECT value FROM json_each(?1)))"),
                    [&list],
                )?;
            }
            ctx.conn.execute("DELETE FROM event_effects WHERE event_id IN (SELECT value FROM json_each(?1))", [&list])?;
            ctx.conn.execute("DELETE FROM runs WHERE event_id IN (SELECT value FROM json_each(?1))", [&list])?;
            super::search::forget(ctx.conn, &list)?;
            ctx.conn.execute("DELETE FROM event_skips WHERE event_id IN (SELECT value FROM json_each(?1))", [&list])?;
            ctx.conn.execute("DELETE FROM event_debounces WHERE event_id IN (SELECT value FROM json_each(?1))", [&list])?;
            ctx.conn.execute("DELETE FROM events WHERE id IN (SELECT value FROM json_each(?1))", [&list])?;
            Ok(ids.len())
        })
        .await
    }

    /// See [`crate::store::Store::event_get`].
    pub async fn event_get(&self, id: String) -> Result<Option<StoredEvent>> {
        self.read(move |c| event_by_id(c, &id)).await
    }

    /// See [`crate::store::Store::event_detail`].
    pub async fn event_detail(&self, id: String) -> Result<Option<EventDetail>> {
        self.read(move |c| {
            let Some(event) = event_by_id(c, &id)? else {
                return Ok(None);
            };
            let mut stmt = c.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE event_id = ?1 ORDER BY seq"))?;
            let mut runs = Vec::new();
            let mut rows = stmt.query([&id])?;
            while let Some(r) = rows.next()? {
                runs.push(run_from_row(r)?);
            }
            let mut children = Vec::new();
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE parent_run_id IN (SELECT id FROM runs WHERE event_id = ?1) ORDER BY seq"
            ))?;
            let mut rows = stmt.query([&id])?;
            while let Some(r) = rows.next()? {
                children.push(event_from_row(c, r)?);
            }
            let skipped = c
                .prepare_cached(
                    "SELECT job_id, reason FROM event_skips WHERE event_id = ?1 ORDER BY job_id",
                )?
                .query_map([&id], |r| {
                    Ok(Skipped {
                        job_id: r.get(0)?,
                        reason: r.get(1)?,
                    })
                })?
                .collect::<rusqlite::Result<_>>()?;
            let debounced = super::debounce::folded(c, &id)?;
            let (resumed_runs, cancelled_runs) = super::links::event_links(c, &id)?;
            Ok(Some(EventDetail {
                event,
                runs,
                children,
                skipped,
                debounced,
                resumed_runs,
                cancelled_runs,
            }))
        })
        .await
    }
}
