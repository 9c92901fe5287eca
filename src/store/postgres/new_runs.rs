//! The runs a PostgreSQL insert creates, laid out as the columns of its `UNNEST` statements
//! (`writer::INSERT_EVENTS_SQL`, `writer::INSERT_RUNS_SQL`): one per job an event fans out to, or
//! one of a given job (an invoked child, a v2 `invokeJob`, a delivered scheduled event), each with
//! its flow-control slots, rate limit, start timeout, priority and `cancel_on` keys.

use std::collections::HashSet;

use tokio_postgres::types::ToSql;

use super::cancel_on::CancelKeys;
use super::debounce::DebouncedRuns;
use crate::model::{EventFields, RunSlots};
use crate::store::Triggers;

/// A new run id: time-ordered, so ids sort by creation (as on SQLite).
fn new_run_id() -> String {
    format!("run_{}", uuid::Uuid::now_v7().simple())
}

/// Columns of runs to insert.
#[derive(Default)]
pub(super) struct NewRuns {
    pub(super) ids: Vec<String>,
    pub(super) event_ids: Vec<String>,
    pub(super) job_ids: Vec<String>,
    pub(super) versions: Vec<String>,
    pub(super) max_attempts: Vec<i32>,
    pub(super) at: Vec<i64>,
    pub(super) slot_a: Vec<Option<String>>,
    pub(super) slot_b: Vec<Option<String>>,
    /// The `flow_slots` rows to create or update (slot, owning job, capacity, due time).
    pub(super) slots: FlowSlotRows,
    /// Rate limits of the runs (key, limit, period, reason; `None` without one).
    pub(super) rate_key: Vec<Option<String>>,
    pub(super) rate_limit: Vec<Option<i32>>,
    pub(super) rate_period: Vec<Option<i64>>,
    pub(super) rate_reason: Vec<Option<String>>,
    /// The jobs with a rate limit among the runs, and those runs: the insert returns the ones
    /// it created (the others were over the limit).
    pub(super) rated_jobs: Vec<String>,
    pub(super) rated_runs: HashSet<String>,
    /// When each run expires unstarted (its job's start timeout), ms.
    pub(super) expires: Vec<Option<i64>>,
    /// The runs of debounced jobs, taken after the insert (their slots are in `slots`).
    pub(super) debounced: DebouncedRuns,
    /// Each run's priority offset, ms (`None`: priority 0).
    pub(super) priority: Vec<Option<i64>>,
    /// The `cancel_on` keys of the runs (written by `cancel_on::arm` after the runs' insert).
    pub(super) cancel_keys: CancelKeys,
}

/// Rows of `flow_slots` written with new runs: `$18 … $21`, `$27`, `$28` of
/// `writer::INSERT_EVENTS_SQL`.
#[derive(Default)]
pub(super) struct FlowSlotRows {
    pub(super) slot: Vec<String>,
    pub(super) job: Vec<Option<String>>,
    pub(super) cap: Vec<i32>,
    pub(super) due: Vec<Option<i64>>,
    /// A throttled first slot's spacing of starts and tolerance, ms.
    pub(super) thr_interval: Vec<Option<f64>>,
    pub(super) thr_tolerance: Vec<Option<f64>>,
}

impl FlowSlotRows {
    fn add(&mut self, job: &str, s: &RunSlots, now: i64) {
        let cap = |c: u32| i32::try_from(c).unwrap_or(i32::MAX);
        self.slot.push(s.a.clone());
        self.job.push(Some(job.to_string()));
        self.cap.push(cap(s.cap_a));
        self.due.push(Some(now));
        self.thr_interval.push(s.throttle.map(|t| t.0));
        self.thr_tolerance.push(s.throttle.map(|t| t.1));
        if let Some((b, c)) = &s.b {
            self.slot.push(b.clone());
            self.job
                .push(b.starts_with("job:").then(|| job.to_string()));
            self.cap.push(cap(*c));
            self.due.push(None);
            self.thr_interval.push(None);
            self.thr_tolerance.push(None);
        }
    }
}

impl NewRuns {
    /// Adds one queued run per job matching the event; returns their ids.
    pub(super) fn fan_out(
        &mut self,
        triggers: &Triggers,
        event: &EventFields<'_>,
        now: i64,
    ) -> Vec<String> {
        triggers
            .matching(event.name, event.payload)
            .into_iter()
            .map(|job| match &job.debounce {
                Some(d) => {
                    let slots = job.run_slots(event);
                    if let Some(s) = &slots {
                        self.slots.add(&job.id, s, now);
                    }
                    let id = new_run_id();
                    self.cancel_keys.add(&job, &id, event, now);
                    self.debounced.add(id, &job, d, event, slots, now)
                }
                None => self.add(&job, event, now),
            })
            .collect()
    }

    /// Adds one queued run of `job` for `event` (its flow-control slots, rate limit and start
    /// timeout as the job sets them); returns its id.
    pub(super) fn add(
        &mut self,
        job: &crate::model::JobSpec,
        event: &EventFields<'_>,
        now: i64,
    ) -> String {
        let id = new_run_id();
        let slots = job.run_slots(event);
        match &job.rate_limit {
            Some(rate) => {
                let key = rate.key_of(event);
                self.rate_reason.push(Some(rate.reason(&key)));
                self.rate_key.push(Some(key));
                self.rate_limit
                    .push(Some(i32::try_from(rate.limit).unwrap_or(i32::MAX)));
                self.rate_period
                    .push(Some(i64::try_from(rate.period_ms).unwrap_or(i64::MAX)));
                if !self.rated_jobs.contains(&job.id) {
                    self.rated_jobs.push(job.id.clone());
                }
                self.rated_runs.insert(id.clone());
            }
            None => {
                self.rate_key.push(None);
                self.rate_limit.push(None);
                self.rate_period.push(None);
                self.rate_reason.push(None);
            }
        }
        if let Some(s) = &slots {
            self.slots.add(&job.id, s, now);
        }
        self.slot_a.push(slots.as_ref().map(|s| s.a.clone()));
        self.slot_b.push(slots.and_then(|s| s.b).map(|(b, _)| b));
        self.expires.push(
            job.start_timeout
                .map(|t| now.saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))),
        );
        self.priority
            .push(job.priority.as_ref().and_then(|p| p.offset_ms(event)));
        self.cancel_keys.add(job, &id, event, now);
        self.ids.push(id.clone());
        self.event_ids.push(event.id.to_string());
        self.job_ids.push(job.id.clone());
        self.versions.push(job.version.clone());
        self.max_attempts
            .push(i32::try_from(job.retry.max_attempts).unwrap_or(i32::MAX));
        self.at.push(now);
        id
    }

    /// The parameters of `writer::INSERT_RUNS_SQL`.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 20] {
        [
            &self.ids,
            &self.event_ids,
            &self.job_ids,
            &self.versions,
            &self.max_attempts,
            &self.at,
            &self.slot_a,
            &self.slot_b,
            &self.slots.slot,
            &self.slots.job,
            &self.slots.cap,
            &self.slots.due,
            &self.rate_key,
            &self.rate_limit,
            &self.rate_period,
            &self.rate_reason,
            &self.slots.thr_interval,
            &self.slots.thr_tolerance,
            &self.expires,
            &self.priority,
        ]
    }
}
