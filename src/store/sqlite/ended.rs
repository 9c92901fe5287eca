//! `flare/run.failed` and `flare/run.cancelled` on SQLite (see `store/ended.rs`): the event of a
//! run just made final, read from its row; `events::send_ended` inserts it inside the write
//! operation that made the run final.

use rusqlite::{params, Connection, OptionalExtension};

use crate::store::ended::RunEnded;
use crate::store::{NewEvent, Result};

/// The event of run `run_id`, just made failed (`error`) or cancelled, to insert at `now`;
/// `None` for a run of a `flare/…` event (or one no longer stored).
pub(super) fn ended_event(
    conn: &Connection,
    run_id: &str,
    cancelled: bool,
    error: Option<&str>,
    now: i64,
) -> Result<Option<NewEvent>> {
    let found: Option<(String, String, String, String, u32)> = conn
        .prepare_cached(
            "SELECT r.job_id, r.job_version, r.event_id, e.name, r.attempt \
             FROM runs r JOIN events e ON e.id = r.event_id WHERE r.id = ?1",
        )?
        .query_row(params![run_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let Some((job_id, job_version, event_id, event_name, attempt)) = found else {
        return Ok(None);
    };
    let ended = RunEnded {
        run_id: run_id.to_string(),
        job_id,
        job_version,
        event_id,
        event_name,
        attempt,
        error: error.map(str::to_string),
        cancelled,
    };
    Ok(ended.event(now))
}
