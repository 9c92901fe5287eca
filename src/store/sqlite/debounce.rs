//! Debounce on SQLite (`model::debounce`, `0024_flow_debounce.sql`): an event for a debounced
//! job is folded into the run of its key's open window, or opens a window with a new run, in
//! the writer's operation that inserts the event (one writer: nothing to race). Also what an
//! event was folded into and what holds a window's run back, for readers.

use rusqlite::{params, Connection, OptionalExtension};

use crate::model::{DebounceWindow, EventFields, JobSpec, Run};
use crate::store::events::Debounced;
use crate::store::Result;

/// The run of `job` that `event` (at `now`) belongs to under the job's debounce `d`: the open
/// window's run of its key, which takes the event (payload, start pushed back, slots and
/// priority of the event) and links the event it had to itself; or, when the key has none that is still
/// queued and never started, a new run due `period` later (`None` when the job's rate limit
/// skips it).
pub(super) fn run_take(
    conn: &Connection,
    job: &JobSpec,
    d: &DebounceWindow,
    event: &EventFields<'_>,
    now: i64,
) -> Result<Option<String>> {
    let key = d.key_of(event);
    let window: Option<(String, i64)> = conn
        .prepare_cached(
            "SELECT run_id, first_at FROM flow_debounces WHERE job_id = ?1 AND key = ?2",
        )?
        .query_row(params![job.id, key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((run, first)) = window {
        let open: Option<(String, i64)> = conn
            .prepare_cached(
                "SELECT event_id, run_at FROM runs WHERE id = ?1 AND status = 'queued' AND started_at IS NULL",
            )?
            .query_row([&run], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((previous, due)) = open {
            let due = d.due(first, now, Some(due));
            let slots = job.run_slots(event);
            if let Some(s) = &slots {
                super::flow::flow_slots_put(conn, s, &job.id, due)?;
            }
            conn.prepare_cached(
                "UPDATE runs SET event_id = ?2, run_at = ?3, slot_a = ?4, slot_b = ?5, expires_at = ?6, priority_ms = ?7 WHERE id = ?1",
            )?
            .execute(params![
                run,
                event.id,
                due,
                slots.as_ref().map(|s| s.a.as_str()),
                slots
                    .as_ref()
                    .and_then(|s| s.b.as_ref())
                    .map(|b| b.0.as_str()),
                job.start_timeout
                    .map(|t| due.saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))),
                job.priority.as_ref().and_then(|p| p.offset_ms(event)),
            ])?;
            conn.prepare_cached(
                "INSERT INTO event_debounces (event_id, job_id, run_id) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            )?
            .execute(params![previous, job.id, run])?;
            return Ok(Some(run));
        }
    }
    let Some(run) = super::flow::run_insert_due(conn, job, event, now, d.due(now, now, None))?
    else {
        return Ok(None);
    };
    conn.prepare_cached(
        "INSERT INTO flow_debounces (job_id, key, run_id, first_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (job_id, key) DO UPDATE SET run_id = excluded.run_id, first_at = excluded.first_at",
    )?
    .execute(params![job.id, key, run, now])?;
    Ok(Some(run))
}

/// The runs event `event` was folded into, by job.
pub(super) fn folded(conn: &Connection, event: &str) -> Result<Vec<Debounced>> {
    Ok(conn
        .prepare_cached(
            "SELECT job_id, run_id FROM event_debounces WHERE event_id = ?1 ORDER BY job_id",
        )?
        .query_map([event], |r| {
            Ok(Debounced {
                job_id: r.get(0)?,
                run_id: r.get(1)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?)
}

/// What holds back queued run `run` when it is the run of an open debounce window (see
/// `crate::store::runs::debounced`).
pub(super) fn waiting_for(conn: &Connection, run: &Run) -> Result<Option<String>> {
    if run.started_at.is_some() {
        return Ok(None);
    }
    let open = conn
        .prepare_cached("SELECT 1 FROM flow_debounces WHERE run_id = ?1")?
        .exists([&run.id])?;
    Ok(open.then(|| crate::store::runs::debounced(run)).flatten())
}
