//! Storage: the only module that speaks SQL. This file is the store's contract: every operation,
//! grouped by noun, one line each; the parameter and result types live beside it, one file per
//! noun (`events`, `runs`, `ended` (the events of runs that fail or are cancelled), `links` (what a run's and an event's detail link to), `steps`, `jobs`, `schedules`, `webhooks`, `endpoints`, `nodes`,
//! `stats`, `page`), the error in `error`.
//!
//! [`Store`] is a concrete type over two backends with the same file names holding the same things
//! ([`sqlite`]: embedded, one writer thread; [`postgres`]: shared by any number of processes),
//! picked by the URL's scheme. Every operation that changes state is one transaction; callers are
//! answered only after it committed. Operations are named noun first (`event_insert`,
//! `runs_claim`) and take plain parameter structs. Text that no stored id can hold (a NUL
//! character) finds nothing, without asking the database, so both backends answer alike.
//!
//! Deliberately different per backend: the payload search index (SQLite fills an FTS5 index
//! behind a watermark, off the insert path, so `search_index` and `search_backlog` have work to do
//! there; PostgreSQL's trigram index is kept by the insert) and `statistics_refresh` (PostgreSQL's
//! planner statistics and dead rows; SQLite needs neither).
//!
//! The store knows nothing of scheduling, HTTP or how jobs run: it stores and reads, and every
//! caller (engine, Rust API, HTTP, benchmarks) goes through this contract; nothing else issues SQL.

/// Calls the same method on whichever backend the store is.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Sqlite($s) => $call,
            Store::Postgres($s) => $call,
        }
    };
}

pub mod ended;
pub mod endpoints;
pub mod error;
pub mod events;
pub mod held;
pub mod jobs;
pub mod links;
pub mod nodes;
pub mod owners;
pub mod page;
pub mod postgres;
pub mod runs;
pub mod schedules;
mod sql;
pub mod sqlite;
pub mod stats;
pub mod steps;
pub mod webhooks;

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::model::{JobSpec, RunStatus, Step, StoredEvent};

pub use endpoints::{EndpointIndex, EndpointReport, IndexApplied, NewEndpoint, StoredEndpoint};
use error::unstorable_id;
pub use error::{storable, Error, Result};
pub use events::{EventDetail, EventQuery, EventStatus, EventSummary, Inserted, NewEvent};
pub use jobs::{JobDefinition, JobSchedule, JobSummary, Triggers};
pub use links::{CancelledBy, LinkedRun};
pub use nodes::{JobPlacement, NodeBeat, NodeSummary};
pub use page::{Cursor, Page};
pub use runs::{
    BulkRunAction, ClaimGroup, ClaimParams, ClaimedRun, Completion, Finish, FlowGroup, Lease,
    PendingWait, RunCounts, RunDetail, RunQuery, RunSummary, BULK_CHUNK,
};
pub use schedules::ScheduleState;
pub use stats::{QueueDepth, Stats, StatsQuery};
pub use steps::{NewChild, NewStep};
pub use webhooks::{
    NewWebhookDelivery, StoredWebhookSource, WebhookDelivery, WebhookRecorded, WebhookRejection,
};

/// The read side's types under their earlier path (`store::query::EventQuery`, …).
pub mod query {
    pub use super::events::{
        search_refusal, EventQuery, EventStatus, EventSummary, MAX_SEARCH_CHARS,
    };
    pub use super::jobs::{JobDefinition, JobSchedule, JobSummary, NEXT_RUNS};
    pub use super::page::{clamp_limit, Cursor, InvalidCursor, Page, DEFAULT_LIMIT, MAX_LIMIT};
    pub use super::runs::{RunCounts, RunQuery, RunSummary};
    pub use super::stats::{
        JobOutcomes, Outcomes, QueueDepth, Stats, StatsBucket, StatsQuery, StatsWindow,
    };
}

/// Events the payload search indexes per [`Store::search_index`] call: SQLite's chunk (see
/// `sqlite/search.rs`); PostgreSQL has nothing to index.
pub const SEARCH_CHUNK: usize = sqlite::SEARCH_CHUNK;

/// The store: one of the backends.
#[derive(Clone, Debug)]
pub enum Store {
    /// Embedded SQLite.
    Sqlite(sqlite::SqliteStore),
    /// PostgreSQL, shared by any number of processes.
    Postgres(postgres::PgStore),
}

/// Opening, and the health of the storage.
impl Store {
    /// Opens `sqlite://PATH` (or a plain path) or `postgres://…`, applying migrations.
    pub async fn open(url: &str) -> Result<Self> {
        if postgres::is_postgres_url(url) {
            return Ok(Store::Postgres(postgres::PgStore::open(url).await?));
        }
        let path = sqlite::path_from_url(url).ok_or_else(|| Error::Url(url.to_string()))?;
        Ok(Store::Sqlite(sqlite::SqliteStore::open(path).await?))
    }

    /// Writes a consistent copy of the SQLite database at `url` to the new file `dest`, online:
    /// the processes using it go on, and every write acknowledged before the backup started is
    /// in it (`VACUUM INTO`, a snapshot that includes the WAL). PostgreSQL is backed up with its
    /// own tools: the error says which.
    pub async fn backup(url: &str, dest: &std::path::Path) -> Result<()> {
        if postgres::is_postgres_url(url) {
            return Err(Error::Invalid(
                "a PostgreSQL database is backed up with PostgreSQL's tools: pg_dump --format=custom \
                 --file=flare.dump <url> (restore with pg_restore), or the server's continuous \
                 archiving"
                    .into(),
            ));
        }
        let path = sqlite::path_from_url(url).ok_or_else(|| Error::Url(url.to_string()))?;
        let dest = dest.to_path_buf();
        tokio::task::spawn_blocking(move || sqlite::backup(&path, &dest))
            .await
            .map_err(|_| Error::Closed)?
    }

    /// Notified when work may have become runnable (a local commit, a PostgreSQL `NOTIFY`); a hint.
    pub fn work_notify(&self) -> &Arc<tokio::sync::Notify> {
        dispatch!(self, s => s.work_notify())
    }

    /// Checks that the database answers a read.
    pub async fn health_read(&self) -> Result<()> {
        dispatch!(self, s => s.health_read().await)
    }

    /// Checks that the database takes a write: upserts the `health` row through the write path.
    pub async fn health_write(&self, now: i64) -> Result<()> {
        dispatch!(self, s => s.health_write(now).await)
    }

    /// Makes every later write fail (or work again) with the database's own read-only switch (tests).
    pub async fn health_fail_writes(&self, on: bool) -> Result<()> {
        dispatch!(self, s => s.health_fail_writes(on).await)
    }

    /// Where the per-minute counts differ from a count of their rows; empty when true (tests).
    #[doc(hidden)]
    pub async fn rollups_drift(&self) -> Result<Vec<String>> {
        dispatch!(self, s => s.rollups_drift().await)
    }
}

/// Events.
impl Store {
    /// Inserts an event; an immediate one gets its runs and resumes the waits it matches in the same transaction (an existing id is a no-op).
    pub async fn event_insert(&self, event: NewEvent) -> Result<Inserted> {
        dispatch!(self, s => s.event_insert(event).await)
    }

    /// Inserts several events in one transaction, all or none, each as [`Store::event_insert`].
    pub async fn event_insert_many(&self, events: Vec<NewEvent>) -> Result<Vec<Inserted>> {
        dispatch!(self, s => s.event_insert_many(events).await)
    }

    /// Cancels a scheduled event that has not been delivered.
    pub async fn event_cancel(&self, id: &str, now: i64) -> Result<StoredEvent> {
        unstorable_id("event", id)?;
        dispatch!(self, s => s.event_cancel(id.to_string(), now).await)
    }

    /// Delivers up to `limit` due scheduled events (creates their runs); returns how many.
    pub async fn events_deliver_due(&self, now: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.events_deliver_due(now, limit).await)
    }

    /// Deletes up to `limit` finished events older than `before` with their runs, steps and logs.
    pub async fn events_prune(&self, before: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.events_prune(before, limit).await)
    }

    /// An event with its run ids.
    pub async fn event_get(&self, id: &str) -> Result<Option<StoredEvent>> {
        if !storable(id) {
            return Ok(None);
        }
        dispatch!(self, s => s.event_get(id.to_string()).await)
    }

    /// An event with its runs and the events they sent.
    pub async fn event_detail(&self, id: &str) -> Result<Option<EventDetail>> {
        if !storable(id) {
            return Ok(None);
        }
        dispatch!(self, s => s.event_detail(id.to_string()).await)
    }

    /// One newest-first page of events matching `q` (a search of at most [`events::MAX_SEARCH_CHARS`]).
    pub async fn events_list(&self, q: EventQuery) -> Result<Page<EventSummary>> {
        if let Some(why) = q.q.as_deref().and_then(events::search_refusal) {
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

    /// Adds up to `limit` events to the payload search index (SQLite; nothing to do on PostgreSQL).
    pub async fn search_index(&self, limit: usize) -> Result<usize> {
        match self {
            Store::Sqlite(s) => s.search_index(limit).await,
            Store::Postgres(_) => Ok(0),
        }
    }

    /// Events not in the payload search index yet (SQLite; searched by a scan meanwhile).
    pub async fn search_backlog(&self) -> Result<u64> {
        match self {
            Store::Sqlite(s) => s.search_backlog().await,
            Store::Postgres(_) => Ok(0),
        }
    }
}

/// Runs.
impl Store {
    /// Claims runnable runs of the listed jobs, starting an attempt of each under a new lease.
    pub async fn runs_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedRun>> {
        dispatch!(self, s => s.runs_claim(params).await)
    }

    /// Records finished attempts; each flag says whether the lease was still held (fencing).
    pub async fn runs_complete(&self, completions: Vec<Completion>) -> Result<Vec<bool>> {
        dispatch!(self, s => s.runs_complete(completions).await)
    }

    /// Extends leases; returns the runs whose lease is gone (cancelled, rescued): stop them.
    pub async fn runs_heartbeat(
        &self,
        leases: Vec<Lease>,
        lease_until: i64,
    ) -> Result<Vec<String>> {
        dispatch!(self, s => s.runs_heartbeat(leases, lease_until).await)
    }

    /// Puts leased runs back in the queue without counting the attempt (shutdown).
    pub async fn runs_release(&self, leases: Vec<Lease>, now: i64) -> Result<usize> {
        dispatch!(self, s => s.runs_release(leases, now).await)
    }

    /// Requeues (or fails, when out of attempts) runs whose lease expired; returns how many.
    pub async fn runs_rescue(&self, now: i64) -> Result<usize> {
        dispatch!(self, s => s.runs_rescue(now).await)
    }

    /// Cancels (up to 1,000) queued runs not started before their job's start timeout, with
    /// the error "expired before it started"; returns how many.
    pub async fn runs_expire(&self, now: i64) -> Result<usize> {
        dispatch!(self, s => s.runs_expire(now).await)
    }

    /// Cancels a queued or running run and removes its lease, in one transaction.
    pub async fn run_cancel(&self, id: &str, now: i64) -> Result<()> {
        unstorable_id("run", id)?;
        dispatch!(self, s => s.run_cancel(id.to_string(), now).await)
    }

    /// Queues a failed or cancelled run again, its limit `max(maxAttempts, attempt + 1)`.
    pub async fn run_retry(&self, id: &str, now: i64) -> Result<()> {
        unstorable_id("run", id)?;
        dispatch!(self, s => s.run_retry(id.to_string(), now).await)
    }

    /// Cancels or retries the runs `ids` (at most [`BULK_CHUNK`]) in one transaction; returns how many.
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

    /// The earliest time a queued run of these jobs, or a scheduled event, becomes due.
    pub async fn runs_next_due(&self, jobs: Vec<String>) -> Result<Option<i64>> {
        dispatch!(self, s => s.runs_next_due(jobs).await)
    }

    /// A run with its logs, attempts and steps.
    pub async fn run_detail(&self, id: &str) -> Result<Option<RunDetail>> {
        if !storable(id) {
            return Ok(None);
        }
        dispatch!(self, s => s.run_detail(id.to_string()).await)
    }

    /// One newest-first page of runs matching `q`, each with its event's name.
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

    /// How many runs are in each state (a scan: benchmarks and tests).
    pub async fn run_counts(&self) -> Result<HashMap<RunStatus, u64>> {
        dispatch!(self, s => s.run_counts().await)
    }
}

/// Durable steps.
impl Store {
    /// Records a step while the run still holds `step.lease` (else false, nothing written).
    pub async fn step_record(&self, step: NewStep) -> Result<bool> {
        if !storable(&step.key) || !storable(&step.lease.run_id) {
            return Ok(false);
        }
        dispatch!(self, s => s.step_record(step).await)
    }

    /// Ends a wait for an event at its timeout unless an event resumed it first; the step's output (`None`: lease lost).
    pub async fn wait_expire(
        &self,
        lease: Lease,
        key: &str,
        now: i64,
    ) -> Result<Option<serde_json::Value>> {
        if !storable(key) || !storable(&lease.run_id) {
            return Ok(None);
        }
        dispatch!(self, s => s.wait_expire(lease, key.to_string(), now).await)
    }

    /// Starts a run of job `job_id` (alone) for the step `key` of the run holding `lease`, once per key, writing no step or wait (a Trigger.dev v2 invoke task, which waits on its own; `io.invoke` is [`Store::runs_invoke`]); its id (`None`: lease lost).
    pub async fn run_invoke(
        &self,
        lease: Lease,
        key: &str,
        job_id: &str,
        payload: serde_json::Value,
        now: i64,
    ) -> Result<Option<String>> {
        if !storable(key) || !storable(&lease.run_id) {
            return Ok(None);
        }
        unstorable_id("job", job_id)?;
        let (key, job_id) = (key.to_string(), job_id.to_string());
        dispatch!(self, s => s.run_invoke(lease, key, job_id, payload, now).await)
    }

    /// Inserts `event` without fan-out and one run of job `job_id` for it (Trigger.dev v2's `invokeJob`); an existing id keeps its event. The run's id (`None`: that event has no run, or the job's rate limit skipped it).
    pub async fn job_invoke(&self, job_id: &str, event: NewEvent) -> Result<Option<String>> {
        unstorable_id("job", job_id)?;
        unstorable_id("event", &event.id)?;
        let job_id = job_id.to_string();
        dispatch!(self, s => s.job_invoke(job_id, event).await)
    }

    /// Starts the runs of job `job_id` (each alone) for the invoke steps of the run holding `lease` in its attempt `attempt`, with each step (waiting, its child's id as output) and the parent's wait for it, committed with the child (in transactions of up to 1,000 children, so the first run while the next are written; a rate-limited job's in one); an event id already stored is that step's child, started once. Their ids in order (`None`: lease lost); an unknown job is `NotFound`, nothing written.
    pub async fn runs_invoke(
        &self,
        lease: Lease,
        job_id: &str,
        attempt: u32,
        children: Vec<NewChild>,
        now: i64,
    ) -> Result<Option<Vec<String>>> {
        if !storable(&lease.run_id)
            || children
                .iter()
                .any(|c| !storable(&c.key) || !storable(&c.event_id))
        {
            return Ok(None);
        }
        unstorable_id("job", job_id)?;
        let job_id = job_id.to_string();
        dispatch!(self, s => s.runs_invoke(lease, job_id, attempt, children, now).await)
    }

    /// Stores the callback step `key` (token, deadline) of the run holding `lease` with its wait, before the job waits on it (false: lease lost).
    pub async fn callback_create(
        &self,
        lease: Lease,
        key: &str,
        token: &str,
        since: i64,
        until: i64,
    ) -> Result<bool> {
        if !storable(key) || !storable(&lease.run_id) || !storable(token) {
            return Ok(false);
        }
        let (key, token) = (key.to_string(), token.to_string());
        dispatch!(self, s => s.callback_create(lease, key, token, since, until).await)
    }

    /// Resumes the run waiting on callback `token` with `body`; false (nothing changed) when the token is unknown, used or past its deadline.
    pub async fn callback_resolve(
        &self,
        token: &str,
        body: serde_json::Value,
        now: i64,
    ) -> Result<bool> {
        if !storable(token) {
            return Ok(false);
        }
        let token = token.to_string();
        dispatch!(self, s => s.callback_resolve(token, body, now).await)
    }

    /// A run's steps, in the order they first started.
    pub async fn run_steps(&self, run_id: &str) -> Result<Vec<Step>> {
        if !storable(run_id) {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.run_steps(run_id.to_string()).await)
    }

    /// A run's steps by key, in no order: what an execution replays from (a fan-in's parent
    /// looks up thousands, and sorting them would be wasted). An invoke step's ended child may
    /// come typed ([`Step::outcome`], read with [`Step::invoked`]) instead of as `output`.
    pub async fn run_steps_by_key(&self, run_id: &str) -> Result<crate::model::StepsByKey> {
        if !storable(run_id) {
            return Ok(Default::default());
        }
        dispatch!(self, s => s.run_steps_by_key(run_id.to_string()).await)
    }
}

/// Jobs and their schedules.
impl Store {
    /// The job definitions fan-out matches against.
    pub fn triggers(&self) -> &Arc<Triggers> {
        dispatch!(self, s => s.triggers())
    }

    /// Stores a job definition (and its schedule) at the system clock's time: [`Store::job_define_at`].
    pub async fn job_define(&self, spec: JobSpec) -> Result<Option<String>> {
        self.job_define_at(spec, Utc::now().timestamp_millis())
            .await
    }

    /// Stores a job definition from code with its schedule in one transaction (an unchanged
    /// schedule keeps its next tick). A stored endpoint job with its id is displaced (one job id,
    /// one owner: [`owners`]): the answer is then that endpoint's URL, and the job carries a note.
    pub async fn job_define_at(&self, spec: JobSpec, now: i64) -> Result<Option<String>> {
        self.triggers().upsert(spec.clone());
        let put = dispatch!(self, s => s.job_define(spec, now).await)?;
        Ok(match put {
            owners::Put::Displaced(url) => Some(url),
            owners::Put::Stored | owners::Put::Refused => None,
        })
    }

    /// Pauses every stored job (`--paused`: a copy of a database opened without running
    /// anything); returns how many were running.
    pub async fn jobs_pause_all(&self) -> Result<u64> {
        dispatch!(self, s => s.jobs_pause_all().await)
    }

    /// Each stored job's endpoint (`None`: defined in code), by job id.
    pub async fn job_owners(&self) -> Result<HashMap<String, Option<String>>> {
        let owners = dispatch!(self, s => s.job_owners().await)?;
        Ok(owners.into_iter().map(|o| (o.job, o.endpoint)).collect())
    }

    /// Pauses (`true`) or resumes job `id`: a paused job's runs are created but not claimed.
    pub async fn job_pause(&self, id: &str, paused: bool) -> Result<()> {
        unstorable_id("job", id)?;
        dispatch!(self, s => s.job_pause(id.to_string(), paused).await)
    }

    /// Every stored job with its queue, outcomes over the hour and day, placement, schedule and
    /// its busiest keys (`held`).
    pub async fn jobs_list(&self, now: DateTime<Utc>) -> Result<Vec<JobSummary>> {
        let now = now.timestamp_millis();
        let mut jobs = dispatch!(self, s => s.jobs_list(now).await)?;
        let mut placements = self.job_placements(now).await?;
        let mut schedules: HashMap<String, ScheduleState> = self
            .schedules_list()
            .await?
            .into_iter()
            .map(|s| (s.job_id.clone(), s))
            .collect();
        let mut keys = dispatch!(self, s => s.flow_keys(held::TOP_KEYS).await)?;
        for job in &mut jobs {
            if let Some(p) = placements.remove(&job.job.id) {
                job.placement = p;
            }
            job.keys = keys.remove(&job.job.id).unwrap_or_default();
            job.schedule = schedules.remove(&job.job.id).map(|s| JobSchedule::new(&s));
        }
        Ok(jobs)
    }

    /// Where each stored job runs (its endpoint, the live nodes defining it), judged at `now`.
    pub async fn job_placements(&self, now: i64) -> Result<HashMap<String, JobPlacement>> {
        let jobs = dispatch!(self, s => s.job_owners().await)?;
        let endpoints = self.endpoints_load().await?;
        let nodes = self.nodes_list(now).await?;
        Ok(nodes::placements(&jobs, &endpoints, &nodes))
    }

    /// Fires up to `limit` due schedules, each tick's event and next tick in one transaction.
    pub async fn schedules_fire_due(&self, now: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.schedules_fire_due(now, limit).await)
    }

    /// Every stored schedule, ordered by job id.
    pub async fn schedules_list(&self) -> Result<Vec<ScheduleState>> {
        dispatch!(self, s => s.schedules_list().await)
    }
}

/// Verified webhook deliveries.
impl Store {
    /// Records a delivery and all its events in one transaction (its text [`storable`]); a repeat stores nothing.
    pub async fn webhook_record(&self, delivery: NewWebhookDelivery) -> Result<WebhookRecorded> {
        dispatch!(self, s => s.webhook_record(delivery).await)
    }

    /// Deletes up to `limit` deliveries received before `before`, oldest first; returns how many.
    pub async fn webhook_deliveries_prune(&self, before: i64, limit: usize) -> Result<usize> {
        dispatch!(self, s => s.webhook_deliveries_prune(before, limit).await)
    }

    /// The latest deliveries, newest first: of one provider, or of all when `None`.
    pub async fn webhook_deliveries_list(
        &self,
        provider: Option<&str>,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>> {
        let provider = provider.map(str::to_string);
        dispatch!(self, s => s.webhook_deliveries_list(provider, limit).await)
    }

    /// One delivery of `source` by its delivery id, if still kept.
    pub async fn webhook_delivery_get(
        &self,
        source: &str,
        delivery_id: &str,
    ) -> Result<Option<WebhookDelivery>> {
        if !storable(source) || !storable(delivery_id) {
            return Ok(None);
        }
        let (source, delivery_id) = (source.to_string(), delivery_id.to_string());
        dispatch!(self, s => s.webhook_delivery_get(source, delivery_id).await)
    }

    /// Keeps a refused delivery of `source`, dropping what falls past the last [`webhooks::REJECTIONS_STORED`].
    pub async fn webhook_rejection_record(&self, rejection: WebhookRejection) -> Result<()> {
        dispatch!(self, s => s.webhook_rejection_record(rejection).await)
    }

    /// The refused deliveries of `source`, newest first.
    pub async fn webhook_rejections_list(
        &self,
        source: &str,
        limit: usize,
    ) -> Result<Vec<WebhookRejection>> {
        if !storable(source) {
            return Ok(Vec::new());
        }
        let source = source.to_string();
        dispatch!(self, s => s.webhook_rejections_list(source, limit).await)
    }
}

/// Webhook sources created through the API or the dashboard.
impl Store {
    /// Stores a new source; `Conflict` when its id is taken.
    pub async fn webhook_source_create(&self, source: StoredWebhookSource) -> Result<()> {
        dispatch!(self, s => s.webhook_source_create(source).await)
    }

    /// One source by id.
    pub async fn webhook_source_get(&self, id: &str) -> Result<Option<StoredWebhookSource>> {
        if !storable(id) {
            return Ok(None);
        }
        let id = id.to_string();
        dispatch!(self, s => s.webhook_source_get(id).await)
    }

    /// Every stored source, by id.
    pub async fn webhook_sources_list(&self) -> Result<Vec<StoredWebhookSource>> {
        dispatch!(self, s => s.webhook_sources_list().await)
    }

    /// Replaces a source's settings and secrets (keeps `created_at`); `NotFound` when it is gone.
    pub async fn webhook_source_update(&self, source: StoredWebhookSource) -> Result<()> {
        unstorable_id("webhook source", &source.id)?;
        dispatch!(self, s => s.webhook_source_update(source).await)
    }

    /// Deletes a source (its deliveries stay until retention); false when there was none.
    pub async fn webhook_source_delete(&self, id: &str) -> Result<bool> {
        if !storable(id) {
            return Ok(false);
        }
        let id = id.to_string();
        dispatch!(self, s => s.webhook_source_delete(id).await)
    }
}

/// HTTP job endpoints.
impl Store {
    /// Registers an endpoint with its first index in one transaction (a URL, id or job in use conflicts).
    pub async fn endpoint_create(
        &self,
        endpoint: NewEndpoint,
        index: EndpointIndex,
    ) -> Result<IndexApplied> {
        dispatch!(self, s => s.endpoint_create(endpoint, index).await)
    }

    /// Registers an endpoint given at start, or updates its secret; its index is left as it is.
    pub async fn endpoint_upsert(&self, endpoint: NewEndpoint) -> Result<()> {
        dispatch!(self, s => s.endpoint_upsert(endpoint).await)
    }

    /// Replaces an endpoint's index: job rows written, jobs that left removed, their queued runs cancelled.
    pub async fn endpoint_index(&self, id: &str, index: EndpointIndex) -> Result<IndexApplied> {
        dispatch!(self, s => s.endpoint_index(id.to_string(), index).await)
    }

    /// Records what a node saw of an endpoint's calls (health, recent errors).
    pub async fn endpoint_report(&self, id: &str, report: EndpointReport) -> Result<()> {
        dispatch!(self, s => s.endpoint_report(id.to_string(), report).await)
    }

    /// Removes an endpoint and its jobs, cancelling their queued runs.
    pub async fn endpoint_remove(&self, id: &str, now: i64) -> Result<IndexApplied> {
        dispatch!(self, s => s.endpoint_remove(id.to_string(), now).await)
    }

    /// Every endpoint, ordered by URL.
    pub async fn endpoints_load(&self) -> Result<Vec<StoredEndpoint>> {
        dispatch!(self, s => s.endpoints_load().await)
    }

    /// The endpoints table's revision (count, sum of the rows' `updated_at`, which every write
    /// raises for its row whatever the writing node's clock says): nodes reload when it changes.
    pub async fn endpoints_revision(&self) -> Result<(i64, i64)> {
        dispatch!(self, s => s.endpoints_revision().await)
    }
}

/// Nodes and the maintenance leadership.
impl Store {
    /// Records that a node is alive and which jobs it defines; forgets nodes not seen for a day.
    pub async fn node_beat(&self, beat: NodeBeat) -> Result<()> {
        dispatch!(self, s => s.node_beat(beat).await)
    }

    /// Forgets a node (it shut down).
    pub async fn node_remove(&self, id: &str) -> Result<()> {
        dispatch!(self, s => s.node_remove(id.to_string()).await)
    }

    /// Every known node, with `live` judged at `now`.
    pub async fn nodes_list(&self, now: i64) -> Result<Vec<NodeSummary>> {
        dispatch!(self, s => s.nodes_list(now).await)
    }

    /// Takes or renews the lease `name` for `holder` until `now + ttl_ms` in one statement; true when held.
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

    /// Gives the lease `name` up if `holder` holds it.
    pub async fn leader_release(&self, name: &str, holder: &str) -> Result<()> {
        let (name, holder) = (name.to_string(), holder.to_string());
        dispatch!(self, s => s.leader_release(name, holder).await)
    }
}

/// Statistics.
impl Store {
    /// Events received and runs finished per bucket, outcomes per job, and the queue.
    pub async fn stats(&self, q: StatsQuery) -> Result<Stats> {
        dispatch!(self, s => s.stats(q).await)
    }

    /// What is waiting to run at `now`.
    pub async fn queue_depth(&self, now: DateTime<Utc>) -> Result<QueueDepth> {
        dispatch!(self, s => s.queue_depth(now.timestamp_millis()).await)
    }

    /// Queued runs at `now` by what they wait for: a worker, an `io.wait`, a retry's backoff,
    /// their paused job (`flare_runs_waiting`).
    pub async fn runs_waiting(&self, now: DateTime<Utc>) -> Result<stats::RunsWaiting> {
        dispatch!(self, s => s.runs_waiting(now.timestamp_millis()).await)
    }

    /// Due queued runs held back at `now` by each kind of limit (`flare_runs_held`).
    pub async fn runs_held(&self, now: DateTime<Utc>) -> Result<held::RunsHeld> {
        dispatch!(self, s => s.runs_held(now.timestamp_millis()).await)
    }

    /// On SQLite, deletes the waits events resumed now, as the writer does once they are a
    /// quarter of the waits (`0055_wait_resumed.sql`); returns how many. PostgreSQL deletes each
    /// wait as it is resumed: 0. For benchmarks, which charge the deletion to the resumptions.
    #[doc(hidden)]
    pub async fn waits_swept(&self) -> Result<usize> {
        match self {
            Store::Sqlite(s) => s.waits_swept().await,
            Store::Postgres(_) => Ok(0),
        }
    }

    /// What a bulk load leaves for later, done now (benchmarks): `VACUUM ANALYZE` on
    /// PostgreSQL, as autovacuum would; on SQLite the WAL checkpointed and reset, as the writer
    /// does once it passes its limit.
    #[doc(hidden)]
    pub async fn statistics_refresh(&self) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.wal_reset().await,
            Store::Postgres(s) => s.statistics_refresh().await,
        }
    }
}
