//! Debounce on PostgreSQL (`model::debounce`, `0024_flow_debounce.sql`): the runs of debounced
//! jobs are not in the event insert's statement; the insert gathers them ([`DebouncedRuns`])
//! and, once it knows which events are new, hands them in order to `flow_debounce` in the same
//! transaction, which folds each event into its key's open window (under the key's row lock, so
//! concurrent senders of one key, in any writer or process, make one run) or opens a window
//! with a new run. Also what an event was folded into and what holds a window's run back.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::rows::rows;
use crate::model::{DebounceWindow, EventFields, JobSpec, Run, RunSlots};
use crate::store::events::Debounced;
use crate::store::Result;

/// One run of a debounced job for a new event: the columns of a new run (as the event insert
/// writes them) and its window's key.
struct DebouncedRun {
    run: String,
    event: String,
    job: String,
    version: String,
    max_attempts: i32,
    at: i64,
    key: String,
    period: i64,
    timeout: Option<i64>,
    slot_a: Option<String>,
    slot_b: Option<String>,
    start_timeout: Option<i64>,
    /// The rate limit: key, limit, period, the reason of a skip.
    rate: Option<(String, i32, i64, String)>,
    /// The priority's offset for this event, ms (`model::priority`).
    priority: Option<i64>,
}

/// The runs of debounced jobs of a batch of events, in order.
#[derive(Default)]
pub(super) struct DebouncedRuns {
    runs: Vec<DebouncedRun>,
}

/// Which run each debounced run of a batch became: the window's run it was folded into, itself
/// (a new window), or none (over its job's rate limit). By the id it was given.
pub(super) type Taken = HashMap<String, Option<String>>;

const DEBOUNCE_SQL: &str = "SELECT ord, run_id FROM flow_debounce($1, $2, $3, $4, $5, $6, $7, $8, \
     $9, $10, $11, $12, $13, $14, $15, $16, $17)";

impl DebouncedRuns {
    /// Adds the run of `job` (debounced by `d`, its slots `slots`) for `event` at `now`, with
    /// the id `run` should it open a window (see [`Taken`]); returns that id.
    pub(super) fn add(
        &mut self,
        run: String,
        job: &JobSpec,
        d: &DebounceWindow,
        event: &EventFields<'_>,
        slots: Option<RunSlots>,
        now: i64,
    ) -> String {
        let rate = job.rate_limit.as_ref().map(|r| {
            let key = r.key_of(event);
            let reason = r.reason(&key);
            (
                key,
                i32::try_from(r.limit).unwrap_or(i32::MAX),
                i64::try_from(r.period_ms).unwrap_or(i64::MAX),
                reason,
            )
        });
        self.runs.push(DebouncedRun {
            run: run.clone(),
            event: event.id.to_string(),
            job: job.id.clone(),
            version: job.version.clone(),
            max_attempts: i32::try_from(job.retry.max_attempts).unwrap_or(i32::MAX),
            at: now,
            key: d.key_of(event),
            period: d.period(),
            timeout: d.timeout_ms.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
            slot_b: slots
                .as_ref()
                .and_then(|s| s.b.as_ref())
                .map(|b| b.0.clone()),
            slot_a: slots.map(|s| s.a),
            start_timeout: job
                .start_timeout
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            rate,
            priority: job.priority.as_ref().and_then(|p| p.offset_ms(event)),
        });
        run
    }

    /// None to take.
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Takes the runs of the events in `created` (all of them when `None`) in the caller's
    /// transaction, after the events were inserted.
    pub(super) async fn take<C: GenericClient>(
        &self,
        c: &C,
        created: Option<&HashSet<String>>,
    ) -> Result<Taken> {
        let runs: Vec<&DebouncedRun> = self
            .runs
            .iter()
            .filter(|r| created.is_none_or(|ids| ids.contains(&r.event)))
            .collect();
        let mut taken = Taken::new();
        if runs.is_empty() {
            return Ok(taken);
        }
        fn col<'a, T>(runs: &[&'a DebouncedRun], f: impl Fn(&'a DebouncedRun) -> T) -> Vec<T> {
            runs.iter().map(|r| f(r)).collect()
        }
        let event = col(&runs, |r| r.event.as_str());
        let job = col(&runs, |r| r.job.as_str());
        let key = col(&runs, |r| r.key.as_str());
        let at = col(&runs, |r| r.at);
        let period = col(&runs, |r| r.period);
        let timeout = col(&runs, |r| r.timeout);
        let run = col(&runs, |r| r.run.as_str());
        let version = col(&runs, |r| r.version.as_str());
        let max_attempts = col(&runs, |r| r.max_attempts);
        let slot_a = col(&runs, |r| r.slot_a.as_deref());
        let slot_b = col(&runs, |r| r.slot_b.as_deref());
        let start_timeout = col(&runs, |r| r.start_timeout);
        let rate_key = col(&runs, |r| r.rate.as_ref().map(|x| x.0.as_str()));
        let rate_limit = col(&runs, |r| r.rate.as_ref().map(|x| x.1));
        let rate_period = col(&runs, |r| r.rate.as_ref().map(|x| x.2));
        let rate_reason = col(&runs, |r| r.rate.as_ref().map(|x| x.3.as_str()));
        let priority = col(&runs, |r| r.priority);
        let params: [&(dyn ToSql + Sync); 17] = [
            &event,
            &job,
            &key,
            &at,
            &period,
            &timeout,
            &run,
            &version,
            &max_attempts,
            &slot_a,
            &slot_b,
            &start_timeout,
            &rate_key,
            &rate_limit,
            &rate_period,
            &rate_reason,
            &priority,
        ];
        for r in rows(c, DEBOUNCE_SQL, &params).await? {
            let ord: i32 = r.try_get(0)?;
            let run = usize::try_from(ord)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| runs.get(i));
            if let Some(run) = run {
                taken.insert(run.run.clone(), r.try_get(1)?);
            }
        }
        Ok(taken)
    }
}

/// The runs event `event` was folded into, by job.
pub(super) async fn folded<C: GenericClient>(c: &C, event: &str) -> Result<Vec<Debounced>> {
    rows(
        c,
        "SELECT job_id, run_id FROM event_debounces WHERE event_id = $1 ORDER BY job_id",
        &[&event],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(Debounced {
            job_id: r.try_get(0)?,
            run_id: r.try_get(1)?,
        })
    })
    .collect()
}

/// What holds back queued run `run` when it is the run of an open debounce window (see
/// `crate::store::runs::debounced`).
pub(super) async fn waiting_for<C: GenericClient>(c: &C, run: &Run) -> Result<Option<String>> {
    if run.started_at.is_some() {
        return Ok(None);
    }
    let open = !rows(
        c,
        "SELECT 1 FROM flow_debounces WHERE run_id = $1",
        &[&run.id],
    )
    .await?
    .is_empty();
    Ok(open.then(|| crate::store::runs::debounced(run)).flatten())
}
