//! Cancelling runs on PostgreSQL inside the caller's transaction: a queued (waiting included) or
//! running run and, with it, the unfinished runs it invoked. Each one's queue row is deleted (and
//! with it any lease, so a late completion's token matches nothing and is refused: fencing), its
//! run row made final and counted, its waits and `cancel_on` keys dropped, the parents waiting
//! for it resumed, and an attempt that was executing recorded as `cancelled`. The failure events
//! are returned for the caller to insert (`writer::insert_follow_ups`), so this module inserts no
//! event.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;

use super::cancel_on::Paths;
use super::rows::{exec, rows};
use super::waits::Delivered;
use crate::model::cancel::cancelled_by_event;
use crate::store::links::Effect;
use crate::store::{NewEvent, Result};

/// Cancels the runs that the delivered `events` cancel (their jobs' `cancel_on`; `paths` and
/// `created`: see `cancel_on::matched`), each linked to its event; returns their `flare/run.cancelled` events,
/// to insert next in the transaction.
pub(super) async fn cancel_delivered<C: GenericClient>(
    c: &C,
    paths: Option<Paths>,
    events: &[Delivered<'_>],
    created: &HashMap<String, usize>,
) -> Result<Vec<NewEvent>> {
    let mut follow = Vec::new();
    for (i, run) in super::cancel_on::matched(c, paths, events, created).await? {
        let e = &events[i];
        let reason = cancelled_by_event(e.name, e.id);
        let (_, ended) = cancelled(c, &run, e.now, Some(&reason), Some(e.id)).await?;
        follow.extend(ended);
    }
    Ok(follow)
}

/// Cancels run `id` (its error set to `reason` when given) and its unfinished invoked runs
/// ([`tree`]), linked to the event `by` if one cancelled them; returns how many, and
/// their `flare/run.cancelled` events to insert.
pub(super) async fn cancelled<C: GenericClient>(
    c: &C,
    id: &str,
    now: i64,
    reason: Option<&str>,
    by: Option<&str>,
) -> Result<(usize, Vec<NewEvent>)> {
    let runs = tree(c, id, now, reason).await?;
    if let Some(event) = by {
        let effects: Vec<(String, String, i64)> = runs
            .iter()
            .map(|r| (event.to_string(), r.clone(), now))
            .collect();
        super::links::effects_put(c, &effects, Effect::Cancelled).await?;
    }
    let ended: Vec<(String, Option<String>)> = runs
        .iter()
        .map(|r| (r.clone(), reason.filter(|_| r == id).map(str::to_string)))
        .collect();
    Ok((
        runs.len(),
        super::ended::ended_events(c, &ended, true, now).await?,
    ))
}

/// Cancels run `id` (its error set to `reason` when given) and its unfinished invoked runs;
/// returns the runs it cancelled, `id` first. Empty when `id` is not queued or running: nothing
/// is written then.
async fn tree<C: GenericClient>(
    c: &C,
    id: &str,
    now: i64,
    reason: Option<&str>,
) -> Result<Vec<String>> {
    // Locks before rows: a parent suspending on its children holds the invoked runs' name lock
    // exclusively and then writes its queue row, which `cancel_row` would hold while
    // `on_run_end` waits for that lock (a deadlock); see `tests/store/wait_locks.rs`.
    exec(c, super::waits::LOCK_INVOKE_SHARED_SQL, &[]).await?;
    let mut cancelled = Vec::new();
    let mut todo = vec![(id.to_string(), reason)];
    while let Some((run, why)) = todo.pop() {
        // The run's lock as a parent (`waits::LOCK_PARENTS_SQL`) before its row: a completion
        // ending one of its children holds it and then writes this run's queue row (fan-in).
        exec(c, "SELECT pg_advisory_xact_lock(28, hashtext($1))", &[&run]).await?;
        if cancel_row(c, &run, now, why).await? == 0 {
            continue;
        }
        super::waits::on_run_end(c, &run, now).await?;
        for child in super::waits::children_unfinished(c, &run).await? {
            todo.push((child, None));
        }
        cancelled.push(run);
    }
    Ok(cancelled)
}

/// The cancellation of one run's rows (see [`tree`]); 1 when it was cancelled, 0 when it was
/// not queued or running.
async fn cancel_row<C: GenericClient>(
    c: &C,
    id: &str,
    now: i64,
    reason: Option<&str>,
) -> Result<usize> {
    Ok(rows(
        c,
        "WITH q AS (DELETE FROM run_queue q USING runs r \
           WHERE r.id = $1 AND q.seq = r.seq \
           RETURNING q.seq, q.attempt, q.started_at, q.node, q.lease_until IS NOT NULL AS running), \
         c AS (UPDATE runs r SET status = 'cancelled', finished_at = $2, attempt = q.attempt, \
             started_at = CASE WHEN q.running THEN q.started_at ELSE r.started_at END, \
             node = CASE WHEN q.running THEN q.node ELSE r.node END, \
             error = coalesce($3::text, r.error) \
           FROM q WHERE r.seq = q.seq RETURNING r.seq, r.id, r.job_id, r.status, r.finished_at, r.attempt, q.running, q.started_at), \
         a AS (INSERT INTO run_attempts (run_id, attempt, outcome, started_at, finished_at, error) \
           SELECT id, attempt, 'cancelled', started_at, $2, 'cancelled while running' FROM c WHERE running), \
         w AS (DELETE FROM run_waits w USING c WHERE w.run_id = c.id), \
         k AS (DELETE FROM run_cancel_keys k USING c WHERE k.run_id = c.id), \
         tally AS (INSERT INTO run_outcomes (minute, job_id, status, n) \
           SELECT finished_at / 60000, job_id, status, count(*) FROM c GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 \
           ON CONFLICT (minute, job_id, status) DO UPDATE SET n = run_outcomes.n + excluded.n) \
         SELECT 1 FROM c",
        &[&id, &now, &reason],
    )
    .await?
    .len())
}
