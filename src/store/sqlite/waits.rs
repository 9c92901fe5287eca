//! Waits for an event on SQLite (`0030_event_waits.sql`): registering a wait with the run's
//! suspension, resuming waiters in the insert of an event, and ending a wait at its timeout.
//!
//! Every write goes through the one writer, so a wait's registration and an event's insert never
//! overlap; the registration still looks for a matching event sent since the run reached the
//! wait (`since`), which closes the gap between the job calling `wait_for_event` and its
//! completion being written.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::rows::{json_text, opt_json};
use super::writer::Guard;
use super::SqliteStore;
use crate::model::wait::{event_value, match_key};
use crate::model::{ms_to_time, EventWait, WaitedEvent};
use crate::store::{Lease, PendingWait, Result};

/// Stores the wait of run `run_id`'s step `key` (suspended at `since`, timing out at `until`) and
/// resumes it at once with the first matching event delivered since `since`, if any. Returns
/// whether it was resumed.
pub(super) fn register(
    conn: &Connection,
    run_id: &str,
    key: &str,
    wait: &EventWait,
    since: i64,
    until: i64,
    now: i64,
) -> Result<bool> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO run_waits \
           (run_id, step_key, event_name, match_path, match_value, condition, run_event, since, until) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        run_id,
        key,
        wait.event,
        wait.match_path,
        wait.match_value,
        wait.condition,
        wait.run_event.as_ref().map(Value::to_string),
        since,
        until
    ])?;
    conn.prepare_cached(
        "INSERT OR IGNORE INTO wait_paths (event_name, match_path) VALUES (?1, ?2)",
    )?
    .execute(params![wait.event, wait.match_path])?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, payload, timestamp FROM events \
         WHERE timestamp >= ?1 AND name = ?2 AND delivered_at IS NOT NULL ORDER BY timestamp, rowid",
    )?;
    let mut rows = stmt.query(params![since, wait.event])?;
    while let Some(r) = rows.next()? {
        let id: String = r.get(0)?;
        let payload = json_text(&r.get::<_, String>(1)?)?;
        if wait.accepts(&event_value(&id, &wait.event, &payload)) {
            let event = WaitedEvent {
                id,
                name: wait.event.clone(),
                payload,
                timestamp: ms_to_time(r.get(2)?),
            };
            return resolve(conn, run_id, key, &event, now);
        }
    }
    Ok(false)
}

/// Resumes every wait the event just delivered matches (broadcast); returns how many.
pub(super) fn on_event(
    conn: &Connection,
    id: &str,
    name: &str,
    payload: &Value,
    at: i64,
    now: i64,
) -> Result<usize> {
    let paths: Vec<String> = conn
        .prepare_cached("SELECT match_path FROM wait_paths WHERE event_name = ?1")?
        .query_map([name], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if paths.is_empty() {
        return Ok(0);
    }
    let incoming = event_value(id, name, payload);
    let mut waiters = Vec::new();
    for path in paths {
        let value = if path.is_empty() {
            String::new()
        } else {
            match match_key(&incoming, &path) {
                Some(v) => v,
                None => continue,
            }
        };
        let mut stmt = conn.prepare_cached(
            "SELECT run_id, step_key, condition, run_event FROM run_waits \
             WHERE event_name = ?1 AND match_path = ?2 AND match_value = ?3",
        )?;
        let mut rows = stmt.query(params![name, path, value])?;
        while let Some(r) = rows.next()? {
            let condition: Option<String> = r.get(2)?;
            let wait = EventWait {
                event: name.to_string(),
                match_path: path.clone(),
                match_value: value.clone(),
                condition,
                run_event: opt_json(r.get(3)?)?,
            };
            if wait.accepts(&incoming) {
                waiters.push((r.get::<_, String>(0)?, r.get::<_, String>(1)?));
            }
        }
    }
    let event = WaitedEvent {
        id: id.to_string(),
        name: name.to_string(),
        payload: payload.clone(),
        timestamp: ms_to_time(at),
    };
    let mut n = 0;
    for (run_id, key) in waiters {
        if resolve(conn, &run_id, &key, &event, now)? {
            n += 1;
        }
    }
    Ok(n)
}

/// Resumes the wait `key` of `run_id` with `event`, unless it is gone (resumed or timed out):
/// the wait row deleted, the step succeeded with the event, a queued run due now.
fn resolve(
    conn: &Connection,
    run_id: &str,
    key: &str,
    event: &WaitedEvent,
    now: i64,
) -> Result<bool> {
    let gone = conn
        .prepare_cached("DELETE FROM run_waits WHERE run_id = ?1 AND step_key = ?2")?
        .execute(params![run_id, key])?;
    if gone == 0 {
        return Ok(false);
    }
    let output = serde_json::to_string(event).unwrap_or_else(|_| "null".into());
    conn.prepare_cached(
        "UPDATE run_steps SET status = 'succeeded', finished_at = ?3, output = ?4 \
         WHERE run_id = ?1 AND key = ?2 AND status <> 'succeeded'",
    )?
    .execute(params![run_id, key, now, output])?;
    conn.prepare_cached("UPDATE runs SET run_at = ?2 WHERE id = ?1 AND status = 'queued'")?
        .execute(params![run_id, now])?;
    Ok(true)
}

/// The pending wait for an event of run `run_id`, if any.
pub(super) fn pending(conn: &Connection, run_id: &str) -> Result<Option<PendingWait>> {
    Ok(conn
        .prepare_cached(
            "SELECT step_key, event_name, match_path, match_value, condition, since, until \
             FROM run_waits WHERE run_id = ?1 ORDER BY since LIMIT 1",
        )?
        .query_row([run_id], |r| {
            Ok(PendingWait::from_row(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?)
}

impl SqliteStore {
    /// See [`crate::store::Store::wait_expire`]: one operation of the writer.
    pub async fn wait_expire(&self, lease: Lease, key: String, now: i64) -> Result<Option<Value>> {
        self.write_guarded(Guard::Batch, move |ctx| {
            let held = ctx
                .conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')",
                )?
                .query_row(params![lease.run_id, lease.token], |r| r.get::<_, bool>(0))?;
            if !held {
                return Ok(None);
            }
            ctx.conn
                .prepare_cached("DELETE FROM run_waits WHERE run_id = ?1 AND step_key = ?2")?
                .execute(params![lease.run_id, key])?;
            ctx.conn
                .prepare_cached(
                    "UPDATE run_steps SET status = 'succeeded', finished_at = ?3, output = 'null' \
                     WHERE run_id = ?1 AND key = ?2 AND status <> 'succeeded'",
                )?
                .execute(params![lease.run_id, key, now])?;
            let output: Option<Option<String>> = ctx
                .conn
                .prepare_cached("SELECT output FROM run_steps WHERE run_id = ?1 AND key = ?2")?
                .query_row(params![lease.run_id, key], |r| r.get(0))
                .optional()?;
            Ok(Some(opt_json(output.flatten())?.unwrap_or(Value::Null)))
        })
        .await
    }
}
