//! What a run's and an event's detail link to on PostgreSQL (see `store/links.rs`): the effects
//! an event had on runs it did not start (`event_effects`, written in the transaction that
//! resumed or cancelled them), and a run's invoking run and invoked runs (from the
//! `flare/job.invoked` events, whose parent is the invoking run).

use deadpool_postgres::GenericClient;

use super::rows::{exec, rows};
use crate::model::wait::INVOKE_EVENT;
use crate::model::{ms_to_time, RunStatus};
use crate::store::links::{invoke_key, linked, CancelledBy, Effect, LinkedRun};
use crate::store::{Result, RunDetail};

/// Records that each event of `effects` (event id, run id, when) had `effect` on its run.
pub(super) async fn effects_put<C: GenericClient>(
    c: &C,
    effects: &[(String, String, i64)],
    effect: Effect,
) -> Result<()> {
    if effects.is_empty() {
        return Ok(());
    }
    let events: Vec<&str> = effects.iter().map(|(e, _, _)| e.as_str()).collect();
    let runs: Vec<&str> = effects.iter().map(|(_, r, _)| r.as_str()).collect();
    let at: Vec<i64> = effects.iter().map(|(_, _, at)| *at).collect();
    exec(
        c,
        "INSERT INTO event_effects (event_id, run_id, effect, at) \
         SELECT DISTINCT ON (e, r) e, r, $3, at FROM unnest($1::text[], $2::text[], $4::int8[]) AS u(e, r, at) \
         ORDER BY e, r \
         ON CONFLICT (event_id, effect, run_id) DO UPDATE SET at = excluded.at",
        &[&events, &runs, &effect.as_str(), &at],
    )
    .await?;
    Ok(())
}

/// Adds to `detail` the event that cancelled it (when that cancel is its final state), the run
/// that invoked it and the runs it invoked.
pub(super) async fn run_links<C: GenericClient>(c: &C, detail: &mut RunDetail) -> Result<()> {
    let run = &detail.run;
    if let (RunStatus::Cancelled, Some(finished)) = (run.status, run.finished_at) {
        detail.cancelled_by = rows(
            c,
            "SELECT f.event_id, e.name, f.at FROM event_effects f JOIN events e ON e.id = f.event_id \
             WHERE f.run_id = $1 AND f.effect = 'cancelled' AND f.at = $2 LIMIT 1",
            &[&run.id, &finished.timestamp_millis()],
        )
        .await?
        .first()
        .map(|r| -> Result<CancelledBy> {
            Ok(CancelledBy {
                event_id: r.try_get(0)?,
                event_name: r.try_get(1)?,
                at: ms_to_time(r.try_get(2)?),
            })
        })
        .transpose()?;
    }
    detail.parent_run_id = rows(
        c,
        "SELECT parent_run_id FROM events WHERE id = $1 AND name = $2",
        &[&run.event_id, &INVOKE_EVENT],
    )
    .await?
    .first()
    .map(|r| r.try_get::<_, Option<String>>(0))
    .transpose()?
    .flatten();
    let parent = run.id.clone();
    detail.children = rows(
        c,
        "SELECT r.id, r.job_id, r.status, e.id FROM events e JOIN run_state r ON r.event_id = e.id \
         WHERE e.parent_run_id = $1 AND e.name = $2 ORDER BY e.seq",
        &[&parent, &INVOKE_EVENT],
    )
    .await?
    .iter()
    .map(|r| {
        let event: String = r.try_get(3)?;
        Ok(linked(
            r.try_get(0)?,
            r.try_get(1)?,
            &r.try_get::<_, String>(2)?,
            invoke_key(&parent, &event),
            None,
        ))
    })
    .collect::<Result<_>>()?;
    Ok(())
}

/// The runs event `id` resumed and those it cancelled, each in the order it did so.
pub(super) async fn event_links<C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<(Vec<LinkedRun>, Vec<LinkedRun>)> {
    let mut resumed = Vec::new();
    let mut cancelled = Vec::new();
    for r in rows(
        c,
        "SELECT r.id, r.job_id, r.status, f.at, f.effect FROM event_effects f \
         JOIN run_state r ON r.id = f.run_id WHERE f.event_id = $1 ORDER BY f.at, r.id",
        &[&id],
    )
    .await?
    {
        let effect: String = r.try_get(4)?;
        let run = linked(
            r.try_get(0)?,
            r.try_get(1)?,
            &r.try_get::<_, String>(2)?,
            None,
            r.try_get(3)?,
        );
        if effect == Effect::Resumed.as_str() {
            resumed.push(run);
        } else {
            cancelled.push(run);
        }
    }
    Ok((resumed, cancelled))
}
