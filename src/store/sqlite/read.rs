//! Read queries of the SQLite backend. They run on read-only connections and never block the
//! writer (WAL readers see the last committed state).

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;

use super::SqliteStore;
use crate::model::{ms_to_time, Attempt, Level, LogLine, Run, RunStatus, StoredEvent};
use crate::store::{Error, EventDetail, Result, RunDetail};

/// Parses stored JSON text.
pub(crate) fn json_text(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("invalid stored JSON: {e}")))
}

pub(super) fn opt_json(text: Option<String>) -> Result<Option<Value>> {
    text.as_deref().map(json_text).transpose()
}

pub(super) const EVENT_COLUMNS: &str =
    "id, name, payload, context, source, parent_run_id, timestamp, deliver_at, delivered_at, cancelled_at";

pub(super) fn event_from_row(conn: &Connection, r: &Row<'_>) -> Result<StoredEvent> {
    let id: String = r.get(0)?;
    let run_ids = run_ids_of(conn, &id)?;
    Ok(StoredEvent {
        name: r.get(1)?,
        payload: json_text(&r.get::<_, String>(2)?)?,
        context: opt_json(r.get(3)?)?,
        source: r.get(4)?,
        parent_run_id: r.get(5)?,
        timestamp: ms_to_time(r.get(6)?),
        deliver_at: r.get::<_, Option<i64>>(7)?.map(ms_to_time),
        delivered_at: r.get::<_, Option<i64>>(8)?.map(ms_to_time),
        cancelled_at: r.get::<_, Option<i64>>(9)?.map(ms_to_time),
        run_ids,
        id,
    })
}

fn run_ids_of(conn: &Connection, event_id: &str) -> Result<Vec<String>> {
    let ids = conn
        .prepare_cached("SELECT id FROM runs WHERE event_id = ?1 ORDER BY seq")?
        .query_map([event_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

/// One event by id, with its run ids.
pub(crate) fn event_by_id(conn: &Connection, id: &str) -> Result<Option<StoredEvent>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = ?1"))?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => Ok(Some(event_from_row(conn, row)?)),
        None => Ok(None),
    }
}

/// The earliest queued run of a job list (`?1`, JSON array). `INDEXED BY`: see
/// [`super::ops::CLAIM_SELECT`]; without it this walks every run the jobs ever had.
pub(super) const NEXT_RUN_SQL: &str =
    "SELECT run_at FROM runs INDEXED BY runs_runnable WHERE status = 'queued' \
     AND job_id IN (SELECT value FROM json_each(?1) \
       WHERE value NOT IN (SELECT id FROM jobs WHERE paused = 1)) ORDER BY run_at LIMIT 1";

pub(super) const RUN_COLUMNS: &str =
    "id, event_id, job_id, job_version, status, attempt, max_attempts, run_at, \
     started_at, finished_at, output, error, created_at, node";

pub(super) fn run_from_row(r: &Row<'_>) -> Result<Run> {
    let status: String = r.get(4)?;
    Ok(Run {
        id: r.get(0)?,
        event_id: r.get(1)?,
        job_id: r.get(2)?,
        job_version: r.get(3)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| Error::Corrupt(format!("unknown run status {status:?}")))?,
        attempt: r.get(5)?,
        max_attempts: r.get(6)?,
        run_at: ms_to_time(r.get(7)?),
        started_at: r.get::<_, Option<i64>>(8)?.map(ms_to_time),
        finished_at: r.get::<_, Option<i64>>(9)?.map(ms_to_time),
        output: opt_json(r.get(10)?)?,
        error: r.get(11)?,
        created_at: ms_to_time(r.get(12)?),
        node: r.get(13)?,
    })
}

impl SqliteStore {
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
            Ok(Some(EventDetail { event, runs, children }))
        })
        .await
    }

    /// See [`crate::store::Store::run_detail`].
    pub async fn run_detail(&self, id: String) -> Result<Option<RunDetail>> {
        self.read(move |c| {
            let run = c
                .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?
                .query_row([&id], |r| Ok(run_from_row(r)))
                .optional()?
                .transpose()?;
            let Some(run) = run else { return Ok(None) };
            let mut logs = Vec::new();
            let mut stmt = c.prepare_cached(
                "SELECT attempt, level, message, fields, at FROM run_logs WHERE run_id = ?1 ORDER BY seq",
            )?;
            let mut rows = stmt.query([&id])?;
            while let Some(r) = rows.next()? {
                let level: String = r.get(1)?;
                logs.push(LogLine {
                    attempt: r.get(0)?,
                    level: Level::parse(&level).unwrap_or(Level::Info),
                    message: r.get(2)?,
                    fields: opt_json(r.get(3)?)?,
                    at: ms_to_time(r.get(4)?),
                });
            }
            let attempts = c
                .prepare_cached(
                    "SELECT attempt, outcome, started_at, finished_at, error FROM run_attempts WHERE run_id = ?1 ORDER BY rowid",
                )?
                .query_map([&id], |r| {
                    Ok(Attempt {
                        attempt: r.get(0)?,
                        outcome: r.get(1)?,
                        started_at: r.get::<_, Option<i64>>(2)?.map(ms_to_time),
                        finished_at: ms_to_time(r.get(3)?),
                        error: r.get(4)?,
                    })
                })?
                .collect::<rusqlite::Result<_>>()?;
            let steps = super::steps::steps_of(c, &id)?;
            Ok(Some(RunDetail::new(run, logs, attempts, steps)))
        })
        .await
    }

    /// See [`crate::store::Store::run_counts`].
    pub async fn run_counts(&self) -> Result<HashMap<RunStatus, u64>> {
        self.read(|c| {
            let mut counts = HashMap::new();
            let mut stmt = c.prepare_cached("SELECT status, count(*) FROM runs GROUP BY status")?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let s: String = r.get(0)?;
                if let Some(st) = RunStatus::parse(&s) {
                    counts.insert(st, r.get::<_, u64>(1)?);
                }
            }
            Ok(counts)
        })
        .await
    }

    /// See [`crate::store::Store::next_due`].
    pub async fn runs_next_due(&self, jobs: Vec<String>) -> Result<Option<i64>> {
        let jobs = serde_json::to_string(&jobs).unwrap_or_default();
        self.read(move |c| {
            let run: Option<i64> = c
                .prepare_cached(NEXT_RUN_SQL)?
                .query_row([&jobs], |r| r.get(0))
                .optional()?;
            let event: Option<i64> = c
                .prepare_cached(
                    "SELECT min(deliver_at) FROM events WHERE delivered_at IS NULL AND cancelled_at IS NULL",
                )?
                .query_row(params![], |r| r.get(0))?;
            Ok(match (run, event) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            })
        })
        .await
    }
}
