//! Jobs in the store: the definitions fan-out matches against ([`Triggers`]), and a job as the
//! jobs list shows it ([`JobSummary`]: its definition, queue, outcomes, placement and schedule).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::nodes::JobPlacement;
use super::runs::RunCounts;
use super::schedules::ScheduleState;
use super::stats::Outcomes;
use crate::filter::Filter;
use crate::model::Debounce;
use crate::model::{
    CancelOn, Concurrency, ConcurrencyLimit, JobSpec, RateLimitSpec, RetryPolicy, ThrottleSpec,
};

use super::error::{Error, Result};

/// The columns of `jobs` a [`JobRow`] reads, in its order (both backends).
pub(crate) const JOB_COLUMNS: &str =
    "id, name, version, event, filter, max_attempts, timeout_ms, concurrency_limits, rate_limit, throttle, start_timeout_ms, debounce, priority, cancel_on";

/// A row of `jobs` as stored, turned into a [`JobSpec`] by [`JobRow::into_spec`]: the same
/// decode for both backends. The stored row keeps what fan-out and the dashboard need (the retry
/// policy's attempts, not its delays; an endpoint's full definitions are rebuilt from its index).
pub(crate) struct JobRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) event: String,
    /// The filter as JSON text.
    pub(crate) filter: Option<String>,
    pub(crate) max_attempts: u32,
    pub(crate) timeout_ms: i64,
    /// The concurrency limits as stored JSON text.
    pub(crate) concurrency_limits: Option<String>,
    /// The rate limit as stored JSON text.
    pub(crate) rate_limit: Option<String>,
    /// The throttle as stored JSON text.
    pub(crate) throttle: Option<String>,
    pub(crate) start_timeout_ms: Option<i64>,
    /// The debounce as stored JSON text.
    pub(crate) debounce: Option<String>,
    /// The priority's CEL expression.
    pub(crate) priority: Option<String>,
    /// The `cancelOn` list as stored JSON text.
    pub(crate) cancel_on: Option<String>,
}

impl JobRow {
    /// The definition, or [`Error::Corrupt`] for a filter that no longer parses.
    pub(crate) fn into_spec(self) -> Result<JobSpec> {
        let filter = match self.filter {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                Some(Filter::parse(&v).map_err(|e| Error::Corrupt(e.to_string()))?)
            }
            None => None,
        };
        let concurrency = match self.concurrency_limits {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                let drafts =
                    ConcurrencyLimit::list_from_json(&v, "concurrency").map_err(Error::Corrupt)?;
                Concurrency::new(&drafts).map_err(Error::Corrupt)?
            }
            None => Concurrency::default(),
        };
        let rate_limit = match self.rate_limit {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                let spec = RateLimitSpec::from_json(&v, "rateLimit").map_err(Error::Corrupt)?;
                Some(spec.check().map_err(Error::Corrupt)?)
            }
            None => None,
        };
        let throttle = match self.throttle {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                let spec = ThrottleSpec::from_json(&v, "throttle").map_err(Error::Corrupt)?;
                Some(spec.check().map_err(Error::Corrupt)?)
            }
            None => None,
        };
        let debounce = match self.debounce {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                let spec = Debounce::from_json(&v, "debounce").map_err(Error::Corrupt)?;
                Some(spec.check().map_err(Error::Corrupt)?)
            }
            None => None,
        };
        let cancel_on = match self.cancel_on {
            Some(text) => {
                let v: Value =
                    serde_json::from_str(&text).map_err(|e| Error::Corrupt(e.to_string()))?;
                CancelOn::list_from_json(&v, "cancelOn").map_err(Error::Corrupt)?
            }
            None => Vec::new(),
        };
        Ok(JobSpec {
            id: self.id,
            name: self.name,
            version: self.version,
            event: self.event,
            filter,
            schedule: None,
            retry: RetryPolicy::default().max_attempts(self.max_attempts),
            timeout: std::time::Duration::from_millis(u64::try_from(self.timeout_ms).unwrap_or(0)),
            concurrency,
            rate_limit,
            throttle,
            start_timeout: self
                .start_timeout_ms
                .map(|ms| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            debounce,
            priority: self
                .priority
                .as_deref()
                .map(crate::model::Priority::parse)
                .transpose()
                .map_err(Error::Corrupt)?,
            cancel_on,
        })
    }
}

/// A job's `cancelOn` list as stored (JSON text; `None` without one).
pub(crate) fn cancel_on_text(spec: &JobSpec) -> Option<String> {
    (!spec.cancel_on.is_empty())
        .then(|| Value::Array(spec.cancel_on.iter().map(CancelOn::to_json).collect()).to_string())
}

/// The stored concurrency limits (JSON text) as the jobs list shows them: the list, empty when
/// there are none or the text does not read.
pub(crate) fn limits_of(text: Option<&str>) -> Vec<Value> {
    match text.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Array(items))) => items,
        _ => Vec::new(),
    }
}

/// The jobs list from what a backend read: each definition (ordered by id) with its queued and
/// running runs (`active`) and its outcomes over the last hour and day. Placement and schedule
/// are added by the contract (`Store::jobs_list`). Written once for both backends.
pub(crate) fn summaries(
    defs: Vec<JobDefinition>,
    mut active: HashMap<String, RunCounts>,
    mut hour: HashMap<String, Outcomes>,
    mut day: HashMap<String, Outcomes>,
) -> Vec<JobSummary> {
    defs.into_iter()
        .map(|job| {
            let load = active.remove(&job.id).unwrap_or_default();
            JobSummary {
                queued: load.queued,
                running: load.running,
                last_hour: hour.remove(&job.id).unwrap_or_default(),
                last_day: day.remove(&job.id).unwrap_or_default(),
                placement: JobPlacement::default(),
                schedule: None,
                keys: Default::default(),
                job,
            }
        })
        .collect()
}

/// The job definitions fan-out matches against, shared by every part of the process.
#[derive(Debug, Default)]
pub struct Triggers {
    /// The definitions and which of them this process made, under one lock: a reload from
    /// storage decides what to keep by the ids defined here, and must see every definition made
    /// before it takes the lock (with two locks, a job defined between the reload's reading of
    /// the ids and its replacing of the definitions was dropped until the next reload, and the
    /// events sent meanwhile started no run of it).
    defs: RwLock<Defs>,
    /// The stored job table's revision last loaded (count, sum of the rows' `updated_at`), so
    /// definitions written by other processes are picked up. Every write of a row raises its own
    /// stamp past the one it had, so the sum changes with every write whatever the writing node's
    /// clock says; the latest stamp alone missed a write from a node whose clock was behind the
    /// latest stamp of another row. Marked only once the definitions read at (or after) it are
    /// in place.
    revision: Mutex<Option<(i64, i64)>>,
    /// Held while the definitions are reloaded from storage. A writer that finds the revision
    /// changed while another writer of this process is still reloading waits for that reload:
    /// marking the revision seen before the reload was done let PostgreSQL's concurrent insert
    /// transactions fan out with the definitions from before, and start no run of a job another
    /// node had just defined.
    reload: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Defs {
    /// Shared, so the fan-out of every event takes references, not copies.
    specs: HashMap<String, Arc<JobSpec>>,
    /// Ids of jobs defined in this process.
    local: HashSet<String>,
}

impl Triggers {
    /// Whether the definitions in place were read at the stored `revision` (or after it).
    pub fn loaded_at(&self, revision: (i64, i64)) -> bool {
        self.revision
            .lock()
            .is_ok_and(|seen| *seen == Some(revision))
    }

    /// Replaces the stored definitions with `stored`, read at or after `revision`, then marks
    /// that revision loaded.
    pub fn replace_stored_at(&self, revision: (i64, i64), stored: Vec<JobSpec>) {
        self.replace_stored(stored);
        if let Ok(mut seen) = self.revision.lock() {
            *seen = Some(revision);
        }
    }

    /// Waits for any reload in progress, and holds off others until dropped: a store whose
    /// writers run at once takes it between finding the revision changed and marking it loaded
    /// (see `reload`).
    pub async fn reloading(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.reload.lock().await
    }

    /// Adds or replaces a definition.
    pub fn upsert(&self, spec: JobSpec) {
        if let Ok(mut defs) = self.defs.write() {
            defs.local.insert(spec.id.clone());
            defs.specs.insert(spec.id.clone(), Arc::new(spec));
        }
    }

    /// Forgets a definition made in this process (an endpoint's job that left its index). A stored
    /// definition of the same id, if any, comes back with the next reload.
    pub fn remove_local(&self, id: &str) {
        if let Ok(mut defs) = self.defs.write() {
            defs.local.remove(id);
            defs.specs.remove(id);
        }
    }

    /// Replaces the definitions read from storage with `stored`: ones that were deleted from
    /// storage stop starting runs. One defined in this process takes precedence.
    pub fn replace_stored(&self, stored: Vec<JobSpec>) {
        if let Ok(mut defs) = self.defs.write() {
            let Defs { specs, local } = &mut *defs;
            specs.retain(|id, _| local.contains(id));
            for spec in stored {
                if !local.contains(&spec.id) {
                    specs.insert(spec.id.clone(), Arc::new(spec));
                }
            }
        }
    }

    /// Adds a definition read from storage; one defined in this process takes precedence.
    pub fn upsert_stored(&self, spec: JobSpec) {
        if let Ok(mut defs) = self.defs.write() {
            if !defs.local.contains(&spec.id) {
                defs.specs.insert(spec.id.clone(), Arc::new(spec));
            }
        }
    }

    /// The jobs an event starts, ordered by job id.
    pub fn matching(&self, name: &str, payload: &Value) -> Vec<Arc<JobSpec>> {
        let Ok(defs) = self.defs.read() else {
            return Vec::new();
        };
        let mut hits: Vec<Arc<JobSpec>> = defs
            .specs
            .values()
            .filter(|s| s.matches(name, payload))
            .cloned()
            .collect();
        hits.sort_by(|a, b| a.id.cmp(&b.id));
        hits
    }

    /// The definition of job `id`, if known.
    pub fn get(&self, id: &str) -> Option<Arc<JobSpec>> {
        self.defs.read().ok()?.specs.get(id).cloned()
    }

    /// Every known definition, ordered by id.
    pub fn all(&self) -> Vec<JobSpec> {
        let Ok(defs) = self.defs.read() else {
            return Vec::new();
        };
        let mut all: Vec<JobSpec> = defs.specs.values().map(|s| JobSpec::clone(s)).collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}

/// A stored job definition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDefinition {
    /// Job id (slug).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Semver version of the latest definition.
    pub version: String,
    /// The event name it listens for.
    pub event: String,
    /// Its payload filter, as written.
    pub filter: Option<Value>,
    /// Attempts allowed per run.
    pub max_attempts: u32,
    /// Per-attempt timeout, ms.
    pub timeout_ms: u64,
    /// The whole job's concurrency limit (runs executing at once across every process), if it
    /// has one.
    pub concurrency: Option<u32>,
    /// Every concurrency limit (`[{"limit", "key"?, "group"?}]`), empty without.
    pub concurrency_limits: Vec<Value>,
    /// Its rate limit (`{"limit", "periodMs", "key"?}`), if any.
    pub rate_limit: Option<Value>,
    /// Its throttle (`{"limit", "periodMs", "burst", "key"?}`), if any.
    pub throttle: Option<Value>,
    /// How long a run may wait to start after it became due, ms.
    pub start_timeout_ms: Option<u64>,
    /// Its debounce (`{"periodMs", "key"?, "timeoutMs"?}`), if any.
    pub debounce: Option<Value>,
    /// Its priority (`{"run": "<CEL>"}`), if any.
    pub priority: Option<Value>,
    /// When the definition was last stored.
    pub updated_at: DateTime<Utc>,
    /// Paused: its runs are created but not claimed until it is resumed.
    pub paused: bool,
}

/// A job with its current load and recent outcomes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    /// The definition.
    #[serde(flatten)]
    pub job: JobDefinition,
    /// Its runs now queued (including waiting for a retry).
    pub queued: u64,
    /// Its runs now running.
    pub running: u64,
    /// Runs that finished in the last hour: [`crate::store::query::StatsWindow::Hour`]'s span (60 whole minutes, the
    /// current one included), as on the statistics page.
    pub last_hour: Outcomes,
    /// Runs that finished in the last 24 hours: [`crate::store::query::StatsWindow::Day`]'s span (24 whole hours).
    pub last_day: Outcomes,
    /// Where it runs: its endpoint, the live nodes defining it, and whether anything serves it.
    pub placement: JobPlacement,
    /// A scheduled job's schedule and next run times; `null` for a job on an event.
    pub schedule: Option<JobSchedule>,
    /// Its keys at their concurrency limit, and its busiest keys (flow control).
    pub keys: super::held::JobKeys,
}

/// How many upcoming run times [`JobSchedule::next_runs`] lists.
pub const NEXT_RUNS: usize = 3;

/// A scheduled job's schedule as the jobs list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSchedule {
    /// The cron expression (cron schedules).
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (cron schedules).
    pub timezone: Option<String>,
    /// The interval in seconds (interval schedules).
    pub interval_seconds: Option<f64>,
    /// A short description: `cron 0 9 * * 1-5 (Europe/Paris)`, `every 5 min`.
    pub description: String,
    /// The next run times, the first being the tick the scheduler fires next.
    pub next_runs: Vec<DateTime<Utc>>,
    /// The last tick fired.
    pub last_run: Option<DateTime<Utc>>,
}

impl JobSchedule {
    /// What the jobs list shows of a stored schedule.
    pub fn new(state: &ScheduleState) -> Self {
        use crate::schedule::Schedule;
        let t = crate::model::ms_to_time;
        let mut next_runs = vec![t(state.next_tick)];
        let mut tick = state.next_tick;
        while next_runs.len() < NEXT_RUNS {
            match state.schedule.next_after(tick) {
                Some(next) => {
                    next_runs.push(t(next));
                    tick = next;
                }
                None => break,
            }
        }
        let (cron, timezone, interval_seconds) = match &state.schedule {
            Schedule::Cron { expr, tz } => (Some(expr.clone()), Some(tz.clone()), None),
            Schedule::Interval(every) => (None, None, Some(every.as_secs_f64())),
        };
        JobSchedule {
            cron,
            timezone,
            interval_seconds,
            description: state.schedule.describe(),
            next_runs,
            last_run: state.last_tick.map(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::{event_trigger, Io, Job, JobError};

    fn spec(id: &str, version: &str) -> JobSpec {
        Job::new(id, id, version)
            .trigger(event_trigger("file.uploaded"))
            .run(|_: Value, _: Io| async { Ok::<_, JobError>(Value::Null) })
            .validate()
            .expect("valid")
            .0
    }

    /// Jobs defined in this process while the definitions read from storage are reloaded (a
    /// background write of an earlier definition changed the job table) are all kept, and no
    /// stored definition replaces one of them, however the two interleave: an event sent next
    /// starts a run of each, of the version defined here.
    #[test]
    fn jobs_defined_during_reloads_are_kept() {
        let triggers = Arc::new(Triggers::default());
        let stop = Arc::new(AtomicBool::new(false));
        let reloads = {
            let (triggers, stop) = (Arc::clone(&triggers), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    triggers.replace_stored(Vec::new());
                    // An older stored version of a job this process defines, or is defining.
                    triggers.upsert_stored(spec(&format!("job-{}", k % 3000), "0.9.0"));
                    k += 7;
                }
            })
        };
        let n = 3000;
        for i in 0..n {
            triggers.upsert(spec(&format!("job-{i}"), "1.0.0"));
        }
        stop.store(true, Ordering::Relaxed);
        reloads.join().expect("reloads");
        let started = triggers.matching("file.uploaded", &Value::Null);
        assert_eq!(
            started.len(),
            n,
            "a job defined during a reload was dropped"
        );
        let stale: Vec<&str> = started
            .iter()
            .filter(|s| s.version != "1.0.0")
            .map(|s| s.id.as_str())
            .collect();
        assert!(
            stale.is_empty(),
            "stored versions replaced local ones: {stale:?}"
        );
    }
}
