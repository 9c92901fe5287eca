//! Concurrency limits on PostgreSQL: the claim of a limited job's runs through its slots, the
//! function `flow_claim` of `0020_flow_concurrency.sql` (one round trip: it walks the slots with
//! room, locks each it takes from, and takes their oldest due runs), and the wake-up of every
//! process when a completion frees slots. The counts of running runs per slot are kept by that
//! migration's triggers on `run_queue`.

use deadpool_postgres::GenericClient;

use super::listen::CHANNEL;
use super::rows::exec;
use crate::store::Result;

/// The claim of one limited job (`$1`, second slot `$2`): the runs `flow_claim` took (now
/// `$3`, lease `$4`, token `$5`, node `$6`, at most `$7`), read for the worker as the plain claim
/// reads them.
pub(super) const FLOW_CLAIM_SQL: &str =
    "SELECT r.id, r.event_id, e.name, r.job_id, c.claimed_attempt, r.max_attempts, e.payload \
     FROM flow_claim($1, $2, $3, $4, $5, $6, $7) c \
     JOIN runs r ON r.seq = c.claimed_seq JOIN events e ON e.id = r.event_id";

/// Wakes the workers of every process (slots were freed).
pub(super) async fn notify<C: GenericClient>(c: &C) -> Result<()> {
    exec(c, "SELECT pg_notify($1, '')", &[&CHANNEL]).await?;
    Ok(())
}
