//! Concurrency limits on PostgreSQL: the claim of a limited job's runs through its slots, the
//! function `flow_claim` of `0020_flow_concurrency.sql` (one round trip: it walks the slots with
//! room, locks each it takes from, and takes their oldest due runs), and the wake-up of every
//! process when a completion frees slots. The counts of running runs per slot are kept by that
//! migration's triggers on `run_queue`.

use deadpool_postgres::GenericClient;

use super::listen::CHANNEL;
use super::rows::{exec, rows};
use crate::store::runs::SlotState;
use crate::store::Result;

/// The claim of one limited job (`$1`, second slot `$2`): the runs `flow_claim` took (now
/// `$3`, lease `$4`, token `$5`, node `$6`, at most `$7`), read for the worker as the plain claim
/// reads them.
pub(super) const FLOW_CLAIM_SQL: &str =
    "SELECT r.id, r.event_id, e.name, r.job_id, c.claimed_attempt, r.max_attempts, e.payload \
     FROM flow_claim($1, $2, $3, $4, $5, $6, $7) c \
     JOIN runs r ON r.seq = c.claimed_seq JOIN events e ON e.id = r.event_id";

/// What holds queued run `run` back, from its slots (see `crate::store::runs::waiting_for`).
pub(super) async fn waiting_for<C: GenericClient>(
    c: &C,
    run: &crate::model::Run,
) -> Result<Option<String>> {
    if run.status != crate::model::RunStatus::Queued {
        return Ok(None);
    }
    let found = rows(
        c,
        "SELECT f.slot, f.cap, f.running, ceil(f.tat - f.thr_tolerance)::int8, f.slot = r.slot_a \
         FROM runs r JOIN flow_slots f ON f.slot IN (r.slot_a, r.slot_b) WHERE r.id = $1",
        &[&run.id],
    )
    .await?;
    let (mut a, mut b) = (None, None);
    for r in &found {
        let state = SlotState {
            slot: r.try_get(0)?,
            cap: i64::from(r.try_get::<_, i32>(1)?),
            running: i64::from(r.try_get::<_, i32>(2)?),
            next_start: r.try_get(3)?,
        };
        if r.try_get::<_, bool>(4)? {
            a = Some(state);
        } else {
            b = Some(state);
        }
    }
    Ok(crate::store::runs::waiting_for(run, a.as_ref(), b.as_ref()))
}

/// Wakes the workers of every process (slots were freed).
pub(super) async fn notify<C: GenericClient>(c: &C) -> Result<()> {
    exec(c, "SELECT pg_notify($1, '')", &[&CHANNEL]).await?;
    Ok(())
}
