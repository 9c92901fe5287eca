//! What a run's and an event's detail link to on SQLite (see `store/links.rs`): the effects an
//! event had on runs it did not start (`event_effects`, written in the transaction that resumed
//! or cancelled them), and a run's invoking run and invoked runs (from the `flare/job.invoked`
//! events, whose parent is the invoking run).

use rusqlite::{params, Connection, OptionalExtension};

use crate::model::wait::INVOKE_EVENT;
use crate::model::{ms_to_time, RunStatus};
use crate::store::links::{invoke_key, linked, CancelledBy, Effect, LinkedRun};
use crate::store::{Result, RunDetail};

/// Records that event `event_id` had `effect` on run `run_id` at `at`.
pub(super) fn effect_put(
    conn: &Connection,
    event_id: &str,
    run_id: &str,
    effect: Effect,
    at: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO event_effects (event_id, run_id, effect, at) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![event_id, run_id, effect.as_str(), at])?;
    Ok(())
}

/// Adds to `detail` the event that cancelled it (when that cancel is its final state), the run
/// that invoked it and the runs it invoked.
pub(super) fn run_links(conn: &Connection, detail: &mut RunDetail) -> Result<()> {
    let run = &detail.run;
    if let (RunStatus::Cancelled, Some(finished)) = (run.status, run.finished_at) {
        detail.cancelled_by = conn
            .prepare_cached(
                "SELECT f.event_id, e.name, f.at FROM event_effects f JOIN events e ON e.id = f.event_id \
                 WHERE f.run_id = ?1 AND f.effect = 'cancelled' AND f.at = ?2 LIMIT 1",
            )?
            .query_row(params![run.id, finished.timestamp_millis()], |r| {
                Ok(CancelledBy {
                    event_id: r.get(0)?,
                    event_name: r.get(1)?,
                    at: ms_to_time(r.get(2)?),
                })
            })
            .optional()?;
    }
    detail.parent_run_id = conn
        .prepare_cached("SELECT parent_run_id FROM events WHERE id = ?1 AND name = ?2")?
        .query_row(params![run.event_id, INVOKE_EVENT], |r| r.get(0))
        .optional()?
        .flatten();
    let parent = run.id.clone();
    detail.children = conn
        .prepare_cached(
            "SELECT r.id, r.job_id, r.status, e.id FROM events e JOIN runs r ON r.event_id = e.id \
             WHERE e.parent_run_id = ?1 AND e.name = ?2 ORDER BY e.rowid",
        )?
        .query_map(params![parent, INVOKE_EVENT], |r| {
            let event: String = r.get(3)?;
            Ok(linked(
                r.get(0)?,
                r.get(1)?,
                &r.get::<_, String>(2)?,
                invoke_key(&parent, &event),
                None,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(())
}

/// The runs event `id` resumed and those it cancelled, each in the order it did so.
pub(super) fn event_links(conn: &Connection, id: &str) -> Result<(Vec<LinkedRun>, Vec<LinkedRun>)> {
    let of = |effect: Effect| -> Result<Vec<LinkedRun>> {
        Ok(conn
            .prepare_cached(
                "SELECT r.id, r.job_id, r.status, f.at FROM event_effects f JOIN runs r ON r.id = f.run_id \
                 WHERE f.event_id = ?1 AND f.effect = ?2 ORDER BY f.at, r.id",
            )?
            .query_map(params![id, effect.as_str()], |r| {
                Ok(linked(
                    r.get(0)?,
                    r.get(1)?,
                    &r.get::<_, String>(2)?,
                    None,
                    r.get(3)?,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?)
    };
    Ok((of(Effect::Resumed)?, of(Effect::Cancelled)?))
}
