//! Storage: the only module that speaks SQL.
//!
//! [`Store`] is a concrete type over the backends: embedded SQLite ([`sqlite`]) and PostgreSQL
//! ([`postgres`]), picked by the URL's scheme. Methods are named noun-first (`event_insert`, `runs_claim`) and take plain parameter
//! structs. Every method that changes state runs in exactly one transaction; on SQLite, concurrent
//! callers are grouped into one transaction by a single writer thread (group commit) and each is
//! answered only after that transaction committed.

/// Calls the same method on whichever backend the store is (here and in [`endpoints`]).
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Sqlite($s) => $call,
            Store::Postgres($s) => $call,
        }
    };
}

pub mod endpoints;
pub mod postgres;
pub mod query;
mod sql;
pub mod sqlite;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use serde_json::Value;

use crate::job::JobSpec;
use crate::model::{Attempt, LogLine, Run, RunStatus, Step, StepKind, StepStatus, StoredEvent};
use query::{
    EventQuery, EventSummary, JobSummary, Page, QueueDepth, RunQuery, RunSummary, Stats, StatsQuery,
};

/// A storage failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The database refused or failed the operation (I/O, locked, read-only, a connection that is
    /// gone, …). The cause is the driver's error (SQLite or PostgreSQL), kept as the source.
    #[error("database error: {0}")]
    Database(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// The storage worker has stopped; the store is closed.
    #[error("the store is closed")]
    Closed,
    /// No such record.
    #[error("{what} {id:?} not found")]
    NotFound {
        /// `event`, `run`, …
        what: &'static str,
        /// The id looked up.
        id: String,
    },
    /// The record is not in a state that allows the operation.
    #[error("{0}")]
    Conflict(String),
    /// The request asks for what the store does not do (a payload search longer than
    /// [`query::MAX_SEARCH_CHARS`]); the message says what to change.
    #[error("{0}")]
    Invalid(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database URL is not understood.
    #[error("unsupported database URL {0:?}: use sqlite://PATH (or a plain file path) or postgres://USER@HOST/DB")]
    Url(String),
}

/// Whether `text` can be stored as text on every backend: PostgreSQL's `text` cannot hold a NUL
/// character (SQLite's can), so no stored id, name or source contains one. Methods that look
/// records up by such text treat one containing NUL as matching nothing, without asking the
/// database (which on PostgreSQL would fail the query), so both backends answer the same;
/// [`crate::client`] refuses to store an event id containing NUL in the first place.
pub fn storable(text: &str) -> bool {
    !text.contains('\0')
}

/// `NotFound` for an id no record can have (see [`storable`]).
fn unstorable_id(what: &'static str, id: &str) -> Result<()> {
    if storable(id) {
        Ok(())
    } else {
        Err(Error::NotFound {
            what,
            id: id.to_string(),
        })
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Database(Arc::new(e))
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Error::Database(Arc::new(postgres::PgError::from(e)))
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => Error::Database(Arc::new(other)),
        }
    }
}

impl Error {
    /// True when the failure is the storage's (the caller should answer 503 and try later), false
    /// when it is about the request (not found, conflict).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Database(_) | Error::Closed | Error::Corrupt(_))
    }
}

/// Result alias for store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An event to insert.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Unique id; an existing id makes the insert a no-op that returns the stored event.
    pub id: String,
    /// Validated name.
    pub name: String,
    /// Payload.
    pub payload: Value,
    /// Optional context.
    pub context: Option<Value>,
    /// Source spelling (`api`, `http`, …).
    pub source: String,
    /// The run that sent it.
    pub parent_run_id: Option<String>,
    /// Due time in ms; `None` or a past time delivers at once.
    pub deliver_at: Option<i64>,
    /// Receive time in ms.
    pub now: i64,
}

/// What an insert did.
#[derive(Debug, Clone)]
pub struct Inserted {
    /// The stored event with its run ids.
    pub event: StoredEvent,
    /// False when the id existed already (nothing new was started).
    pub created: bool,
}

/// Claim up to `limit` runnable runs of the listed jobs.
#[derive(Debug, Clone)]
pub struct ClaimGroup {
    /// Job ids.
    pub jobs: Vec<String>,
    /// At most this many.
    pub limit: usize,
}

/// Parameters of a claim.
#[derive(Debug, Clone)]
pub struct ClaimParams {
    /// Now, ms.
    pub now: i64,
    /// Lease expiry for the claimed runs, ms.
    pub lease_until: i64,
    /// The claiming process (engine node id), recorded on each run so operators see which node
    /// ran it.
    pub node: Option<String>,
    /// What to claim.
    pub groups: Vec<ClaimGroup>,
}

/// A claimed run, ready to execute.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    /// Run id.
    pub id: String,
    /// Its event.
    pub event_id: String,
    /// The event's name.
    pub event_name: String,
    /// Job id.
    pub job_id: String,
    /// This attempt's number (from 1).
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The fencing token: completions must present it.
    pub token: i64,
    /// The event payload.
    pub payload: Value,
    /// When this attempt started, ms.
    pub started_at: i64,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub enum Finish {
    /// Succeeded with an output.
    Succeeded(Value),
    /// Failed; try again at `at` (ms).
    Retry {
        /// Error message.
        error: String,
        /// Next attempt time, ms.
        at: i64,
    },
    /// Failed for good.
    Failed(String),
    /// Suspended by `io.wait`: the wait step `key` is recorded (due at `until`, called at
    /// `since`) and the run goes back to the queue due at `until`, the attempt not counted.
    Wait {
        /// The wait step's key.
        key: String,
        /// Due time, ms: the run's next `run_at`.
        until: i64,
        /// When the job called `wait`, ms.
        since: i64,
    },
}

/// The end of one attempt, fenced by its lease token.
#[derive(Debug, Clone)]
pub struct Completion {
    /// Run id.
    pub run_id: String,
    /// The run's job (as claimed): the per-minute outcome counts are kept by job.
    pub job_id: String,
    /// The lease token the attempt was claimed with.
    pub token: i64,
    /// Attempt number.
    pub attempt: u32,
    /// When the attempt started, ms.
    pub started_at: i64,
    /// When it ended, ms.
    pub finished_at: i64,
    /// Outcome.
    pub finish: Finish,
    /// Log lines it wrote.
    pub logs: Vec<LogLine>,
}

/// A step to record for a run that holds a lease (see [`Store::step_record`]).
#[derive(Debug, Clone)]
pub struct NewStep {
    /// The run and the lease token of the attempt recording it (fencing).
    pub lease: Lease,
    /// Unique within the run.
    pub key: String,
    /// Task, wait or event.
    pub kind: StepKind,
    /// Succeeded, failed or waiting.
    pub status: StepStatus,
    /// The run's attempt.
    pub attempt: u32,
    /// When the step started, ms.
    pub started_at: i64,
    /// When it ended, ms.
    pub finished_at: Option<i64>,
    /// A wait's due time, ms.
    pub wait_until: Option<i64>,
    /// A succeeded task's result.
    pub output: Option<Value>,
    /// A failed task's error.
    pub error: Option<String>,
}

/// A run holding a lease: id and fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Run id.
    pub run_id: String,
    /// Token.
    pub token: i64,
}

/// An event with its runs and the events its runs sent.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventDetail {
    /// The event.
    #[serde(flatten)]
    pub event: StoredEvent,
    /// Runs it started.
    pub runs: Vec<Run>,
    /// Events sent by those runs.
    pub children: Vec<StoredEvent>,
}

/// A run with its log and attempts.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunDetail {
    /// The run.
    #[serde(flatten)]
    pub run: Run,
    /// Its log lines, oldest first.
    pub logs: Vec<LogLine>,
    /// Finished attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// Its durable steps (`io.run_task`, `io.wait`, chained `io.send_event`), in the order they
    /// first started.
    pub steps: Vec<Step>,
}

impl RunDetail {
    /// The run's detail from its stored attempts. A succeeded run's last attempt is not stored
    /// as a row of its own: the run row already holds all of it (number, start, end, no error),
    /// and leaving it out spares the hot path one insert per run. It is added back here, unless
    /// an older version of Flare stored it.
    pub(crate) fn new(
        run: Run,
        logs: Vec<LogLine>,
        mut attempts: Vec<Attempt>,
        steps: Vec<Step>,
    ) -> Self {
        let succeeded = RunStatus::Succeeded.as_str();
        if let (RunStatus::Succeeded, Some(finished_at)) = (run.status, run.finished_at) {
            // Matched on the outcome too: an attempt released at shutdown keeps its number, and
            // the attempt that ran again after it has the same one.
            if !attempts
                .iter()
                .any(|a| a.attempt == run.attempt && a.outcome == succeeded)
            {
                attempts.push(Attempt {
                    attempt: run.attempt,
                    outcome: succeeded.to_string(),
                    started_at: run.started_at,
                    finished_at,
                    error: None,
                });
            }
        }
        RunDetail {
            run,
            logs,
            attempts,
            steps,
        }
    }
}

/// The job definitions fan-out matches against, shared by every part of the process.
#[derive(Debug, Default)]
pub struct Triggers {
    /// Shared, so the fan-out of every event takes references, not copies.
    specs: RwLock<HashMap<String, Arc<JobSpec>>>,
    /// Ids of jobs defined in this process.
    local: RwLock<std::collections::HashSet<String>>,
    /// The stored job table's revision last loaded (count, latest update), so definitions written
    /// by other processes are picked up.
    revision: std::sync::Mutex<Option<(i64, i64)>>,
}

impl Triggers {
    /// Records the stored revision; returns true when it differs from the last one seen.
    pub fn revision_changed(&self, revision: (i64, i64)) -> bool {
        match self.revision.lock() {
            Ok(mut seen) if *seen != Some(revision) => {
                *seen = Some(revision);
                true
            }
            _ => false,
        }
    }

    /// Adds or replaces a definition.
    pub fn upsert(&self, spec: JobSpec) {
        if let Ok(mut local) = self.local.write() {
            local.insert(spec.id.clone());
        }
        if let Ok(mut specs) = self.specs.write() {
            specs.insert(spec.id.clone(), Arc::new(spec));
        }
    }

    /// Forgets a definition made in this process (an endpoint's job that left its index). A stored
    /// definition of the same id, if any, comes back with the next reload.
    pub fn remove_local(&self, id: &str) {
        if let Ok(mut local) = self.local.write() {
            local.remove(id);
        }
        if let Ok(mut specs) = self.specs.write() {
            specs.remove(id);
        }
    }

    /// Replaces the definitions read from storage with `stored`: ones that were deleted from
    /// storage stop starting runs. One defined in this process takes precedence.
    pub fn replace_stored(&self, stored: Vec<JobSpec>) {
        let local = self.local.read().map(|l| l.clone()).unwrap_or_default();
        if let Ok(mut specs) = self.specs.write() {
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
        let is_local = self
            .local
            .read()
            .map(|l| l.contains(&spec.id))
            .unwrap_or(false);
        if is_local {
            return;
        }
        if let Ok(mut specs) = self.specs.write() {
            specs.insert(spec.id.clone(), Arc::new(spec));
        }
    }

    /// The jobs an event starts, ordered by job id.
    pub fn matching(&self, name: &str, payload: &Value) -> Vec<Arc<JobSpec>> {
        let Ok(specs) = self.specs.read() else {
            return Vec::new();
        };
        let mut hits: Vec<Arc<JobSpec>> = specs
            .values()
            .filter(|s| s.matches(name, payload))
            .cloned()
            .collect();
        hits.sort_by(|a, b| a.id.cmp(&b.id));
        hits
    }

    /// Every known definition, ordered by id.
    pub fn all(&self) -> Vec<JobSpec> {
        let Ok(specs) = self.specs.read() else {
            return Vec::new();
        };
        let mut all: Vec<JobSpec> = specs.values().map(|s| JobSpec::clone(s)).collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}

// ---------------------------------------------------------------------------------------------
// Ingest: batches of events and verified webhook deliveries.
// ---------------------------------------------------------------------------------------------

/// A verified webhook delivery to record, with the events it produces. See
/// [`Store::webhook_record`].
#[derive(Debug, Clone)]
pub struct NewWebhookDelivery {
    /// Which webhook route received it: `payments` or `auth`.
    pub provider: String,
    /// The provider's id for the delivery (Stripe event id, `svix-id`): the dedupe key.
    pub delivery_id: String,
    /// The provider's event type, e.g. `payment_intent.succeeded`.
    pub event_type: String,
    /// The exact bytes that were signed.
    pub raw_body: Vec<u8>,
    /// Receive time, ms.
    pub received_at: i64,
    /// The events to send; their ids should be derived from the delivery so a retry cannot
    /// send them twice.
    pub events: Vec<NewEvent>,
}

/// What recording a webhook delivery did.
#[derive(Debug, Clone)]
pub struct WebhookRecorded {
    /// The ids of the delivery's events: the new ones, or for a duplicate the original ones.
    pub event_ids: Vec<String>,
    /// True when the delivery had been recorded before: nothing was stored or started.
    pub duplicate: bool,
    /// The events stored now, with their run ids (empty for a duplicate).
    pub events: Vec<StoredEvent>,
}

/// A recorded webhook delivery, for the dashboard.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// `payments` or `auth`.
    pub provider: String,
    /// The provider's id for the delivery.
    pub delivery_id: String,
    /// When it was received.
    pub received_at: chrono::DateTime<chrono::Utc>,
    /// The provider's event type.
    pub event_type: String,
    /// `accepted`.
    pub outcome: String,
    /// The events it produced.
    pub event_ids: Vec<String>,
    /// The raw body (lossy UTF-8; the database keeps the exact bytes).
    pub raw_body: String,
}

/// A scheduled job's schedule as stored, with its next and last tick (ms).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleState {
    /// The job.
    pub job_id: String,
    /// Its schedule.
    pub schedule: crate::schedule::Schedule,
    /// The next tick the scheduler fires.
    pub next_tick: i64,
    /// The last tick it fired, if any.
    pub last_tick: Option<i64>,
}

/// A row of `schedules` as read: job id, stored spec, time zone, next tick, last tick.
pub(crate) type ScheduleRow = (String, String, Option<String>, i64, Option<i64>);

/// The event that fires `job_id`'s `tick` (ms), inserted at `now`: id `schedule:<job>:<tick>` (so
/// a tick inserted twice is one event), name `schedule.<job>`, source `schedule`, payload
/// `{"ts": <tick>, "lastTimestamp": <previous tick or null>}` as RFC 3339 times (Trigger.dev's
/// scheduled payload).
pub(crate) fn tick_event(job_id: &str, tick: i64, last: Option<i64>, now: i64) -> NewEvent {
    let iso =
        |ms: i64| crate::model::ms_to_time(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    NewEvent {
        id: crate::schedule::Schedule::event_id(job_id, tick),
        name: crate::schedule::Schedule::event_name(job_id),
        payload: serde_json::json!({ "ts": iso(tick), "lastTimestamp": last.map(iso) }),
        context: None,
        source: "schedule".into(),
        parent_run_id: None,
        deliver_at: None,
        now,
    }
}

/// What firing a due schedule does: the tick it fires (the most recent one at or before `now`,
/// see [`crate::schedule`]'s catch-up rule) and the next tick after `now`, or `None` when the
/// schedule never fires again.
pub(crate) fn tick_due(
    schedule: &crate::schedule::Schedule,
    due: i64,
    now: i64,
) -> (i64, Option<i64>) {
    let tick = schedule.latest_at(due, now);
    let next = match schedule.next_after(tick) {
        Some(n) if n > now => Some(n),
        _ => schedule.next_after(now),
    };
    (tick, next)
}

/// What a bulk action does to each run it selects (see [`Store::runs_bulk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkRunAction {
    /// Cancel queued or running runs.
    Cancel,
    /// Queue failed or cancelled runs again.
    Retry,
}

/// Runs changed in one transaction of a bulk action.
pub const BULK_CHUNK: usize = 500;

/// The store: one of the backends.
#[derive(Clone, Debug)]
pub enum Store {
    /// Embedded SQLite.
    Sqlite(sqlite::SqliteStore),
    /// PostgreSQL, shared by any number of processes.
    Postgres(postgres::PgStore),
}

impl Store {
    /// Opens the store named by `url` (`sqlite://flare.db`, `sqlite:flare.db` or a plain path;
    /// `postgres://…` or `postgresql://…`), applying migrations.
    pub async fn open(url: &str) -> Result<Self> {
        if postgres::is_postgres_url(url) {
            return Ok(Store::Postgres(postgres::PgStore::open(url).await?));
        }
        let path = sqlite::path_from_url(url).ok_or_else(|| Error::Url(url.to_string()))?;
        Ok(Store::Sqlite(sqlite::SqliteStore::open(path).await?))
    }

    /// Notified when work may have become runnable: after a local commit that queued runs and,
    /// on PostgreSQL, on a `NOTIFY` from another process. A hint only: workers also poll.
    pub fn work_notify(&self) -> &Arc<tokio::sync::Notify> {
        dispatch!(self, s => s.work_notify())
    }

    /// The job definitions fan-out uses.
    pub fn triggers(&self) -> &Arc<Triggers> {
        dispatch!(self, s => s.triggers())
    }

    /// Registers a job definition for fan-out now and stores it (see [`Store::job_define_at`]),
    /// at the system clock's time.
    pub async fn job_define(&self, spec: JobSpec) -> Result<()> {
        self.job_define_at(spec, chrono::Utc::now().timestamp_millis())
            .await
    }

    /// Registers a job definition for fan-out now and stores it, with its schedule in the same
    /// transaction: a new or changed schedule's next tick is the first after `now` (ms), an
    /// unchanged one keeps its next tick (a restart neither skips nor repeats one), and a job
    /// without a schedule has its schedule row removed.
    pub async fn job_define_at(&self, spec: JobSpec, now: i64) -> Result<()> {
        self.triggers().upsert(spec.clone());
        dispatch!(self, s => s.job_define(spec, now).await)
    }

    /// Fires up to `limit` due schedules: for each, in one transaction, inserts the tick's event
    /// ([`tick_event`], so its runs start like any event's) and moves the next tick past `now`.
    /// Several nodes may call it at once: each due schedule fires once. Returns how many fired.
    pub async fn schedules_fire_due(&self, now: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.schedules_fire_due(now, limit).await)
    }

    /// Every stored schedule, ordered by job id.
    pub async fn schedules_list(&self) -> Result<Vec<ScheduleState>> {
        dispatch!(self, s => s.schedules_list().await)
    }

    /// Inserts an event; an immediate one gets its runs in the same transaction.
    pub async fn event_insert(&self, event: NewEvent) -> Result<Inserted> {
        dispatch!(self, s => s.event_insert(event).await)
    }

    /// Cancels a scheduled event that has not been delivered.
    pub async fn event_cancel(&self, id: &str, now: i64) -> Result<StoredEvent> {
        unstorable_id("event", id)?;
        dispatch!(self, s => s.event_cancel(id.to_string(), now).await)
    }

    /// Delivers up to `limit` due scheduled events (creates their runs). Returns how many.
    pub async fn events_deliver_due(&self, now: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.events_deliver_due(now, limit).await)
    }

    /// Claims runnable runs, starting an attempt of each under a new lease.
    pub async fn runs_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedRun>> {
        dispatch!(self, s => s.runs_claim(params).await)
    }

    /// Records finished attempts. Each flag says whether the lease was still held (fencing).
    pub async fn runs_complete(&self, completions: Vec<Completion>) -> Result<Vec<bool>> {
        dispatch!(self, s => s.runs_complete(completions).await)
    }

    /// Extends the leases of running runs. Returns the ids of the runs whose lease is no longer
    /// held (cancelled, or rescued after it expired): their executions should stop.
    pub async fn runs_heartbeat(
        &self,
        leases: Vec<Lease>,
        lease_until: i64,
    ) -> Result<Vec<String>> {
        dispatch!(self, s => s.runs_heartbeat(leases, lease_until).await)
    }

    /// Puts runs back in the queue without counting the attempt (graceful shutdown).
    pub async fn runs_release(&self, leases: Vec<Lease>, now: i64) -> Result<usize> {
        dispatch!(self, s => s.runs_release(leases, now).await)
    }

    /// Requeues (or fails, when out of attempts) runs whose lease expired. Returns how many.
    pub async fn runs_rescue(&self, now: i64) -> Result<usize> {
        dispatch!(self, s => s.runs_rescue(now).await)
    }

    /// Cancels a queued or running run: final (counted as cancelled) in one transaction that also
    /// removes its lease, so the completion of an attempt still executing is refused (fencing);
    /// the engine running it notices at its next heartbeat and stops it.
    pub async fn run_cancel(&self, id: &str, now: i64) -> Result<()> {
        unstorable_id("run", id)?;
        dispatch!(self, s => s.run_cancel(id.to_string(), now).await)
    }

    /// Cancels (queued or running) or retries (failed or cancelled) the runs `ids` in one
    /// transaction, skipping the ones in another state or gone; returns how many it changed.
    /// Callers bound `ids` (the API: [`BULK_CHUNK`] per call to this).
    pub async fn runs_bulk(
        &self,
        action: BulkRunAction,
        ids: Vec<String>,
        now: i64,
    ) -> Result<usize> {
        let ids: Vec<String> = ids.into_iter().filter(|id| storable(id)).collect();
        if ids.is_empty() {
            return Ok(0);
        }
        dispatch!(self, s => s.runs_bulk(action, ids, now).await)
    }

    /// Pauses (`true`) or resumes job `id`: a paused job's runs are still created by the events
    /// that match it, but no worker claims them until it is resumed (runs already executing
    /// finish). Not found when no job `id` is stored.
    pub async fn job_pause(&self, id: &str, paused: bool) -> Result<()> {
        unstorable_id("job", id)?;
        dispatch!(self, s => s.job_pause(id.to_string(), paused).await)
    }

    /// Queues a failed or cancelled run for one more attempt. Its attempt count is kept and its
    /// limit becomes `max(maxAttempts, attempt + 1)`: a run out of attempts gets exactly one more
    /// (3 of 3 becomes 3 of 4), and one that ended before using its attempts (cancelled, an
    /// invalid payload, a fatal error) keeps the ones it had left (1 of 3 stays 1 of 3).
    pub async fn run_retry(&self, id: &str, now: i64) -> Result<()> {
        unstorable_id("run", id)?;
        dispatch!(self, s => s.run_retry(id.to_string(), now).await)
    }

    /// Deletes up to `limit` finished events older than `before` (ms) with their runs and logs.
    pub async fn prune(&self, before: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.prune(before, limit).await)
    }

    /// The earliest time something becomes due for these jobs: a queued run or a scheduled event.
    pub async fn next_due(&self, jobs: Vec<String>) -> Result<Option<i64>> {
        dispatch!(self, s => s.next_due(jobs).await)
    }

    /// Adds up to `limit` events not yet in the payload search's index to it; returns how many
    /// (fewer than `limit`: caught up). SQLite indexes behind a watermark, off the insert path
    /// (`sqlite/search.rs`; searches stay complete meanwhile); PostgreSQL's trigram index is kept
    /// by the insert itself, so there this does nothing.
    pub async fn search_index(&self, limit: usize) -> Result<usize> {
        match self {
            Store::Sqlite(s) => s.search_index(limit).await,
            Store::Postgres(_) => Ok(0),
        }
    }

    /// Does now what PostgreSQL's autovacuum does some time after a bulk load (`VACUUM
    /// ANALYZE`: the planner's statistics, and the dead rows of the run queue's churn cleared);
    /// SQLite needs neither. For benchmarks that measure right after seeding: before the first
    /// ANALYZE the planner guesses row counts and picked bitmap scans and sorts that made several
    /// pages take 0.2-1.5 s at a million events.
    #[doc(hidden)]
    pub async fn statistics_refresh(&self) -> Result<()> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Postgres(s) => s.statistics_refresh().await,
        }
    }

    /// Events not in the payload search's index yet (searched by a scan meanwhile).
    pub async fn search_backlog(&self) -> Result<u64> {
        match self {
            Store::Sqlite(s) => s.search_backlog().await,
            Store::Postgres(_) => Ok(0),
        }
    }

    /// An event with its run ids.
    pub async fn event_get(&self, id: &str) -> Result<Option<StoredEvent>> {
        if !storable(id) {
            return Ok(None);
        }
        dispatch!(self, s => s.event_get(id.to_string()).await)
    }

    /// An event with its runs and child events.
    pub async fn event_detail(&self, id: &str) -> Result<Option<EventDetail>> {
        if !storable(id) {
            return Ok(None);
        }
        dispatch!(self, s => s.event_detail(id.to_string()).await)
    }

    /// A run with its logs and attempts.
    pub async fn run_detail(&self, id: &str) -> Result<Option<RunDetail>> {
        if !storable(id) {
            return Ok(None);
        }
        dispatch!(self, s => s.run_detail(id.to_string()).await)
    }

    /// Records a step of a run (insert, or replace the step of the same key), only while the
    /// run still holds `step.lease` (fencing): false, and nothing written, when it does not. One
    /// write of its own, answered after it committed.
    pub async fn step_record(&self, step: NewStep) -> Result<bool> {
        if !storable(&step.key) || !storable(&step.lease.run_id) {
            return Ok(false);
        }
        dispatch!(self, s => s.step_record(step).await)
    }

    /// A run's steps, in the order they first started.
    pub async fn run_steps(&self, run_id: &str) -> Result<Vec<Step>> {
        if !storable(run_id) {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.run_steps(run_id.to_string()).await)
    }

    /// How many runs are in each state.
    pub async fn run_counts(&self) -> Result<HashMap<RunStatus, u64>> {
        dispatch!(self, s => s.run_counts().await)
    }

    /// Takes or renews the lease `name` for `holder` until `now + ttl_ms`: true when `holder`
    /// holds it afterwards. It succeeds when nobody holds it, when `holder` already does, or when
    /// the current holder's lease expired (`expires_at <= now`); one statement, so two nodes
    /// racing for it cannot both win.
    pub async fn leader_acquire(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool> {
        let (name, holder) = (name.to_string(), holder.to_string());
        dispatch!(self, s => s.leader_acquire(name, holder, now, ttl_ms).await)
    }

    /// Gives the lease `name` up if `holder` holds it (another node may take it at once).
    pub async fn leader_release(&self, name: &str, holder: &str) -> Result<()> {
        let (name, holder) = (name.to_string(), holder.to_string());
        dispatch!(self, s => s.leader_release(name, holder).await)
    }

    /// Checks that the database answers a read.
    pub async fn ping(&self) -> Result<()> {
        dispatch!(self, s => s.ping().await)
    }

    /// Checks that the database takes a write: upserts the one row of the `health` table (time
    /// `now`, ms) through the normal write path (on SQLite, in the writer's next batch), so a
    /// database that is read-only, full or corrupt fails it. Cheap enough to run every second.
    pub async fn health_write(&self, now: i64) -> Result<()> {
        dispatch!(self, s => s.health_write(now).await)
    }

    /// Where the per-minute counts the rates and statistics read differ from a count of the rows
    /// they summarise, one line per minute and key; empty when they agree. For tests: the
    /// behaviour suites check it after every test, so each write path must keep the counts true.
    #[doc(hidden)]
    pub async fn rollups_drift(&self) -> Result<Vec<String>> {
        dispatch!(self, s => s.rollups_drift().await)
    }

    /// Makes every later write fail (or work again), to test how callers handle storage that is
    /// down. Uses the database's own read-only switch, so the failure is a real one.
    pub async fn set_read_only(&self, on: bool) -> Result<()> {
        dispatch!(self, s => s.set_read_only(on).await)
    }

    // -----------------------------------------------------------------------------------------
    // Ingest: batches of events and verified webhook deliveries.
    // -----------------------------------------------------------------------------------------

    /// Inserts several events in ONE transaction (all or nothing); each immediate one gets its
    /// runs. An existing id is a no-op for that event, as in [`Store::event_insert`].
    pub async fn event_insert_many(&self, events: Vec<NewEvent>) -> Result<Vec<Inserted>> {
        dispatch!(self, s => s.event_insert_many(events).await)
    }

    /// Records a verified webhook delivery and inserts ALL its events (with their runs) in ONE
    /// transaction. A delivery already recorded for the provider stores nothing and returns the
    /// original event ids with `duplicate: true`.
    pub async fn webhook_record(&self, delivery: NewWebhookDelivery) -> Result<WebhookRecorded> {
        dispatch!(self, s => s.webhook_record(delivery).await)
    }

    /// Deletes up to `limit` webhook deliveries (with their raw bodies) received before `before`
    /// (ms), oldest first; returns how many. The events they produced are pruned with the events
    /// ([`Store::prune`]). A provider retrying a delivery after it was pruned is recorded again
    /// as new, so the retention must outlast the providers' retries (Stripe: 3 days).
    pub async fn webhook_deliveries_prune(&self, before: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.webhook_deliveries_prune(before, limit).await)
    }

    /// The latest recorded deliveries, newest first: of one provider, or of all when `None`.
    pub async fn webhook_deliveries_list(
        &self,
        provider: Option<&str>,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>> {
        let provider = provider.map(str::to_string);
        dispatch!(self, s => s.webhook_deliveries_list(provider, limit).await)
    }
}

/// The read side for the JSON API and the dashboard (types in [`query`]). Lists are newest first
/// and keyset-paginated; every query uses an index.
impl Store {
    /// One page of events matching `q`, each with its outcome and run counts. A payload search
    /// longer than [`query::MAX_SEARCH_CHARS`] is [`Error::Invalid`]: every list and bulk action
    /// of the API and the dashboard comes through here.
    pub async fn events_list(&self, q: EventQuery) -> Result<Page<EventSummary>> {
        if let Some(why) = q.q.as_deref().and_then(query::search_refusal) {
            return Err(Error::Invalid(why));
        }
        if ![&q.name, &q.source, &q.q]
            .into_iter()
            .flatten()
            .all(|t| storable(t))
        {
            return Ok(Page::empty());
        }
        dispatch!(self, s => s.events_list(q).await)
    }

    /// One page of runs matching `q`, each with its event's name.
    pub async fn runs_list(&self, q: RunQuery) -> Result<Page<RunSummary>> {
        if ![&q.job_id, &q.event_id]
            .into_iter()
            .flatten()
            .all(|t| storable(t))
        {
            return Ok(Page::empty());
        }
        dispatch!(self, s => s.runs_list(q).await)
    }

    /// Every stored job definition (ordered by id) with its queued and running runs now and its
    /// outcomes over the hour and the 24 hours before `now`.
    /// Each says where it runs (its endpoint, the live nodes that define it) and flags a job that
    /// nothing serves now.
    pub async fn jobs_list(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Vec<JobSummary>> {
        let now = now.timestamp_millis();
        let mut jobs = dispatch!(self, s => s.jobs_list(now).await)?;
        let mut placements = self.job_placements(now).await?;
        let mut schedules: HashMap<String, ScheduleState> = self
            .schedules_list()
            .await?
            .into_iter()
            .map(|s| (s.job_id.clone(), s))
            .collect();
        for job in &mut jobs {
            if let Some(p) = placements.remove(&job.job.id) {
                job.placement = p;
            }
            job.schedule = schedules
                .remove(&job.job.id)
                .map(|s| query::JobSchedule::new(&s));
        }
        Ok(jobs)
    }

    /// Events received and runs finished per time bucket, outcomes per job, and the queue.
    pub async fn stats(&self, q: StatsQuery) -> Result<Stats> {
        dispatch!(self, s => s.stats(q).await)
    }

    /// What is waiting to run at `now`.
    pub async fn queue_depth(&self, now: chrono::DateTime<chrono::Utc>) -> Result<QueueDepth> {
        dispatch!(self, s => s.queue_depth(now.timestamp_millis()).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ms_to_time;

    fn run(status: RunStatus, attempt: u32) -> Run {
        Run {
            id: "run_1".into(),
            event_id: "evt_1".into(),
            job_id: "job".into(),
            job_version: "1".into(),
            status,
            attempt,
            max_attempts: 3,
            run_at: ms_to_time(1_000),
            started_at: Some(ms_to_time(2_000)),
            finished_at: (status != RunStatus::Queued).then(|| ms_to_time(3_000)),
            output: None,
            error: None,
            created_at: ms_to_time(1_000),
            node: None,
        }
    }

    fn attempt(n: u32, outcome: &str) -> Attempt {
        Attempt {
            attempt: n,
            outcome: outcome.into(),
            started_at: Some(ms_to_time(500)),
            finished_at: ms_to_time(900),
            error: Some("boom".into()),
        }
    }

    #[test]
    fn a_succeeded_run_gets_its_last_attempt_from_the_run_row() {
        let d = RunDetail::new(
            run(RunStatus::Succeeded, 2),
            vec![],
            vec![attempt(1, "retrying")],
            vec![],
        );
        let outcomes: Vec<_> = d.attempts.iter().map(|a| a.outcome.as_str()).collect();
        assert_eq!(outcomes, ["retrying", "succeeded"]);
        let last = &d.attempts[1];
        assert_eq!(last.attempt, 2);
        assert_eq!(last.started_at, Some(ms_to_time(2_000)));
        assert_eq!(last.finished_at, ms_to_time(3_000));
        assert_eq!(last.error, None);
    }

    #[test]
    fn a_stored_success_row_is_not_doubled_and_other_states_add_nothing() {
        let old = RunDetail::new(
            run(RunStatus::Succeeded, 1),
            vec![],
            vec![attempt(1, "succeeded")],
            vec![],
        );
        assert_eq!(old.attempts.len(), 1);
        let after_release = RunDetail::new(
            run(RunStatus::Succeeded, 1),
            vec![],
            vec![attempt(1, "released")],
            vec![],
        );
        let outcomes: Vec<_> = after_release
            .attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect();
        assert_eq!(outcomes, ["released", "succeeded"]);
        let failed = RunDetail::new(
            run(RunStatus::Failed, 1),
            vec![],
            vec![attempt(1, "failed")],
            vec![],
        );
        assert_eq!(failed.attempts.len(), 1);
        let queued = RunDetail::new(
            run(RunStatus::Queued, 1),
            vec![],
            vec![attempt(1, "retrying")],
            vec![],
        );
        assert_eq!(queued.attempts.len(), 1);
    }
}
