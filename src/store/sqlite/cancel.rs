//! Cancelling runs on SQLite inside the caller's write: a queued (waiting included) or running
//! run and, with it, the unfinished runs it invoked. Each is made final and counted, its lease
//! removed (so the completion of an attempt still executing no longer matches and is refused:
//! fencing), its waits and `cancel_on` keys dropped, the parents waiting for it resumed, and a
//! running attempt recorded as `cancelled`. The failure events are the caller's to send (see
//! `events::cancel_runs`), so this module inserts no event.

use rusqlite::{params, OptionalExtension};

use super::writer::WriteCtx;
use crate::store::Result;

/// Cancels run `id` (its error set to `reason` when given) and its unfinished invoked runs,
/// depth first; returns the runs it cancelled, `id` first. Empty when `id` is not queued or
/// running: nothing is written then.
pub(super) fn tree(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    now: i64,
    reason: Option<&str>,
) -> Result<Vec<String>> {
    let mut cancelled = Vec::new();
    let mut todo = vec![(id.to_string(), reason)];
    while let Some((run, why)) = todo.pop() {
        if !one(ctx, &run, now, why)? {
            continue;
        }
        for child in super::children::children_unfinished(ctx.conn, &run)? {
            todo.push((child, None));
        }
        cancelled.push(run);
    }
    Ok(cancelled)
}

/// Cancels run `id` alone if it is queued or running; whether it did.
fn one(ctx: &mut WriteCtx<'_>, id: &str, now: i64, reason: Option<&str>) -> Result<bool> {
    // Read before the write: whether an attempt is executing.
    let found: Option<(String, String, u32, Option<i64>)> = ctx
        .conn
        .prepare_cached("SELECT status, job_id, attempt, started_at FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let Some((status, job, attempt, started)) = found else {
        return Ok(false);
    };
    if status != "queued" && status != "running" {
        return Ok(false);
    }
    ctx.conn
        .prepare_cached(
            "UPDATE runs SET status = 'cancelled', finished_at = ?2, lease_until = NULL, lease_token = NULL, \
             error = coalesce(?3, error) WHERE id = ?1",
        )?
        .execute(params![id, now, reason])?;
    ctx.tally.run(now, &job, "cancelled", 1);
    // Its waits end with it: a late event, callback or child no longer resumes it.
    ctx.conn
        .prepare_cached("DELETE FROM run_waits WHERE run_id = ?1")?
        .execute([id])?;
    ctx.conn
        .prepare_cached("DELETE FROM children_waiting WHERE run_id = ?1")?
        .execute([id])?;
    super::cancel_on::disarm(ctx.conn, id)?;
    ctx.wake |= super::children::on_run_end(ctx.conn, id, now)? > 0;
    if status == "running" {
        ctx.conn
            .prepare_cached(
                "INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
                 VALUES (?1, ?2, 'cancelled', ?3, ?4, 'cancelled while running')",
            )?
            .execute(params![id, attempt, started, now])?;
    }
    Ok(true)
}
