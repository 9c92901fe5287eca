//! `flare/run.failed` and `flare/run.cancelled` on PostgreSQL (see `store/ended.rs`): the events
//! of runs just made final, read from their rows; `writer::send_ended` inserts them in the
//! transaction that made the runs final, through the ordinary insert of events.

use deadpool_postgres::GenericClient;

use super::rows::{rows, u32_of};
use crate::store::ended::RunEnded;
use crate::store::{NewEvent, Result};

/// The events of the runs `ended` (id, error), just made failed or `cancelled`, to insert at
/// `now`, in run id order; none for runs of `flare/…` events.
pub(super) async fn ended_events<C: GenericClient>(
    c: &C,
    ended: &[(String, Option<String>)],
    cancelled: bool,
    now: i64,
) -> Result<Vec<NewEvent>> {
    if ended.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = ended.iter().map(|(id, _)| id.as_str()).collect();
    let mut events = Vec::with_capacity(ended.len());
    for r in rows(
        c,
        "SELECT r.id, r.job_id, r.job_version, r.event_id, e.name, r.attempt \
         FROM runs r JOIN events e ON e.id = r.event_id WHERE r.id = ANY($1) ORDER BY r.id",
        &[&ids],
    )
    .await?
    {
        let run_id: String = r.try_get(0)?;
        let error = ended
            .iter()
            .find(|(id, _)| *id == run_id)
            .and_then(|(_, e)| e.clone());
        let run = RunEnded {
            run_id,
            job_id: r.try_get(1)?,
            job_version: r.try_get(2)?,
            event_id: r.try_get(3)?,
            event_name: r.try_get(4)?,
            attempt: u32_of(&r, 5)?,
            error,
            cancelled,
        };
        events.extend(run.event(now));
    }
    Ok(events)
}
