//! Rows of the SQLite tables turned into the model: events (with their run ids), runs, job
//! definitions (and the fan-out's [`Triggers`](crate::store::Triggers) reloaded from them),
//! schedules, endpoints; the JSON text columns. Reads only; no `impl SqliteStore`.

use rusqlite::{Connection, Row};
use serde_json::Value;

use crate::model::{ms_to_time, JobSpec, Run, RunStatus, StoredEvent};
use crate::store::endpoints::EndpointRow;
use crate::store::jobs::{JobRow, JOB_COLUMNS};
use crate::store::{Error, Result};

/// A new run id: time-ordered, so ids sort by creation.
pub(crate) fn new_run_id() -> String {
    format!("run_{}", uuid::Uuid::now_v7().simple())
}

/// Loads stored job definitions (so fan-out knows jobs defined by other processes).
pub(super) fn jobs_load(conn: &Connection) -> Result<Vec<JobSpec>> {
    let mut stmt = conn.prepare(&format!("SELECT {JOB_COLUMNS} FROM jobs"))?;
    let rows = stmt.query_map([], |r| {
        Ok(JobRow {
            id: r.get(0)?,
            name: r.get(1)?,
            version: r.get(2)?,
            event: r.get(3)?,
            filter: r.get(4)?,
            max_attempts: r.get(5)?,
            timeout_ms: r.get(6)?,
            concurrency_limits: r.get(7)?,
            rate_limit: r.get(8)?,
            throttle: r.get(9)?,
            start_timeout_ms: r.get(10)?,
            debounce: r.get(11)?,
            priority: r.get(12)?,
            cancel_on: r.get(13)?,
        })
    })?;
    rows.map(|row| row?.into_spec()).collect()
}

/// Reloads stored job definitions when the job table changed (another process defined a job), so
/// fan-out starts every job known to the database. One tiny query per batch.
pub(super) fn triggers_refresh(conn: &Connection, triggers: &crate::store::Triggers) -> Result<()> {
    let revision: (i64, i64) = conn
        .prepare_cached("SELECT count(*), coalesce(sum(updated_at), 0) FROM jobs")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    // The one writer reloads: no other batch runs meanwhile.
    if !triggers.loaded_at(revision) {
        triggers.replace_stored_at(revision, jobs_load(conn)?);
    }
    Ok(())
}

/// Reads a row of `schedules` (`job_id, spec, timezone, next_tick, last_tick`).
pub(super) fn schedule_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<crate::store::schedules::ScheduleRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

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

pub(super) fn run_ids_of(conn: &Connection, event_id: &str) -> Result<Vec<String>> {
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

pub(super) fn endpoint_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EndpointRow> {
    Ok(EndpointRow {
        id: r.get(0)?,
        url: r.get(1)?,
        secret: r.get(2)?,
        created_at: r.get(3)?,
        updated_at: r.get(4)?,
        indexed_at: r.get(5)?,
        jobs: r.get(6)?,
        last_ok_at: r.get(7)?,
        last_error_at: r.get(8)?,
        errors: r.get(9)?,
        protocol: r.get(10)?,
        client_id: r.get(11)?,
        skipped: r.get(12)?,
    })
}
