//! Concurrency limits on PostgreSQL: the claim of a limited job's runs through its slots, the
//! function `flow_claim` of `0020_flow_concurrency.sql` (it walks the slots with room, locks
//! each it takes from, and takes their oldest due runs; then the runs taken are read), and the
//! wake-up of every process when a completion frees slots. The counts of running runs per slot
//! are kept by that migration's triggers on `run_queue`.

use deadpool_postgres::{GenericClient, Object};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::listen::CHANNEL;
use super::rows::{exec, rows};
use super::PgStore;
use crate::store::runs::SlotState;
use crate::store::Result;

/// The claim of one limited job (`$1`, second slot `$2`): the queue rows `flow_claim` took
/// (now `$3`, lease `$4`, token `$5`, node `$6`, at most `$7`) and their attempt numbers.
const FLOW_TAKE_SQL: &str =
    "SELECT claimed_seq, claimed_attempt FROM flow_claim($1, $2, $3, $4, $5, $6, $7)";

/// The runs taken by [`FLOW_TAKE_SQL`] (`$1` seqs, `$2` attempts), read for the worker as the
/// plain claim reads them.
const FLOW_READ_SQL: &str =
    "SELECT r.id, r.event_id, e.name, r.job_id, c.attempt, r.max_attempts, e.payload \
     FROM unnest($1::int8[], $2::int4[]) AS c(seq, attempt) \
     JOIN runs r ON r.seq = c.seq JOIN events e ON e.id = r.event_id";

/// Claims the due runs of one limited job (the parameters of [`FLOW_TAKE_SQL`]) in one
/// transaction of two statements (after the claim's `settings`), the second reading what the
/// first took.
///
/// Not one statement: `flow_claim` is a volatile function, so each of its statements sees the
/// rows committed up to that statement, while the statement calling it reads with the snapshot
/// it started with. A run inserted in between was leased by the function and then dropped by
/// the join on `runs` and `events` that could not see it: leased, never returned to the worker,
/// stuck "running" until its lease expired. The read is a statement of its own, after the take,
/// in the same transaction (a failed read rolls the take back).
pub(super) async fn claim(
    store: &PgStore,
    c: &Object,
    settings: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let take = c.prepare_cached(FLOW_TAKE_SQL).await?;
    let read = c.prepare_cached(FLOW_READ_SQL).await?;
    let mode = if store.read_only() { " READ ONLY" } else { "" };
    let begin = format!("BEGIN{mode}; {settings}");
    let (began, taken) = futures::join!(c.batch_execute(&begin), c.query(&take, params));
    let taken = match began.and(taken) {
        Ok(taken) => taken,
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(e.into());
        }
    };
    let mut seqs = Vec::with_capacity(taken.len());
    let mut attempts = Vec::with_capacity(taken.len());
    for r in &taken {
        seqs.push(r.try_get::<_, i64>(0)?);
        attempts.push(r.try_get::<_, i32>(1)?);
    }
    let read_params: [&(dyn ToSql + Sync); 2] = [&seqs, &attempts];
    let (found, ended) = futures::join!(c.query(&read, &read_params), c.batch_execute("COMMIT"));
    let found = found?;
    ended?;
    Ok(found)
}

/// The rows of a group's claim, or `None` when it failed after earlier groups of the same
/// claim committed theirs (`claimed`): those runs must reach the worker, else they would stay
/// leased, unrun, until their leases expire; this group's error is logged and met again at the
/// next claim.
pub(super) fn unless_claimed(taken: Result<Vec<Row>>, claimed: bool) -> Result<Option<Vec<Row>>> {
    match taken {
        Ok(taken) => Ok(Some(taken)),
        Err(e) if claimed => {
            if let Some(suppressed) = crate::log_throttle::storage_failure("postgres:claim") {
                tracing::error!(error = %e, suppressed, "claiming a group of runs failed; the runs claimed before it start");
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

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

/// Wakes the workers of every process (`NOTIFY`, delivered at commit): slots freed, runs due.
pub(super) async fn notify<C: GenericClient>(c: &C) -> Result<()> {
    exec(c, "SELECT pg_notify($1, '')", &[&CHANNEL]).await?;
    Ok(())
}
