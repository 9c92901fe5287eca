//! `flare/run.failed` and `flare/run.cancelled` on SQLite (see `store/ended.rs`): inserted inside
//! the write operation that made the run final.

use rusqlite::{params, OptionalExtension};

use super::events::insert_event;
use super::writer::WriteCtx;
use crate::store::ended::RunEnded;
use crate::store::Result;

/// Sends the event of run `run_id`, just made failed (`error`) or cancelled, in the caller's write.
pub(super) fn send_ended(
    ctx: &mut WriteCtx<'_>,
    run_id: &str,
    cancelled: bool,
    error: Option<&str>,
    now: i64,
) -> Result<()> {
    let found: Option<(String, String, String, String, u32)> = ctx
        .conn
        .prepare_cached(
            "SELECT r.job_id, r.job_version, r.event_id, e.name, r.attempt \
             FROM runs r JOIN events e ON e.id = r.event_id WHERE r.id = ?1",
        )?
        .query_row(params![run_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let Some((job_id, job_version, event_id, event_name, attempt)) = found else {
        return Ok(());
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
    if let Some(event) = ended.event(now) {
        let (payload, context) = event.texts();
        insert_event(ctx, &event, &payload, context.as_deref())?;
    }
    Ok(())
}
