//! The engine: claims runnable runs, executes them, records their outcome; keeps delayed events,
//! expired leases and old data in order.
//!
//! Tasks, each small and named:
//! - the **worker** loop claims runs of locally defined jobs in batches (up to the free slots) when
//!   woken by a commit that created work, or when the next run is due;
//! - the **executor** ([`executor`]) runs one attempt: payload → job → outcome, catching panics and
//!   timeouts, and decides retry or failure with the job's [`retry::RetryPolicy`], or that the
//!   run waits ([`steps`]: durable steps, waits that end the execution);
//! - the **completer** records finished attempts in batches, fenced by each claim's lease token;
//! - the **heartbeat** extends the leases of runs still executing;
//! - the **maintenance** services ([`maintenance`]): scheduler (delayed events), rescuer (expired
//!   leases), pruner (retention). Each has a `run_once` that tests call directly.

pub mod executor;
pub mod maintenance;
pub mod retry;
pub mod steps;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::job::{Handler, InvalidJob, Job, JobSpec};
use crate::log_throttle::storage_failure;
use crate::store::{ClaimGroup, ClaimParams, Completion, Lease, Store};

/// Engine settings. Defaults suit a small service.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Runs executing at once in this process (per-job limits apply on top). Default 100.
    pub concurrency: usize,
    /// Most runs claimed in one transaction. Default 500.
    pub claim_batch: usize,
    /// How long a claim stays valid without a heartbeat. Default 30 s.
    pub lease: Duration,
    /// Longest the worker and scheduler wait before looking again. Default 200 ms.
    pub poll_interval: Duration,
    /// Finished events and runs older than this are pruned. `None` keeps everything. Default 7 days.
    pub retention: Option<Duration>,
    /// How often the pruner runs. Default 1 minute.
    pub prune_interval: Duration,
    /// How long running runs may take to finish at shutdown. Default 30 s.
    pub shutdown_grace: Duration,
    /// How long a shutdown may take past the grace period: the time the storage gets to record
    /// the last outcomes, release the runs still executing and hand leadership over, whatever it
    /// does (a full disk, a database gone). Default 10 s.
    pub shutdown_bound: Duration,
    /// How long the maintenance leadership lasts without renewal: when the leading node dies,
    /// another takes over within this time. Renewed every poll interval, so keep it several
    /// poll intervals long. Default 2 s.
    pub leader_ttl: Duration,
    /// How often this node records that it is alive and which jobs it defines (the dashboard
    /// flags jobs no live node defines). Default 5 s.
    pub node_beat: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            concurrency: 100,
            claim_batch: 500,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            retention: Some(Duration::from_secs(7 * 86_400)),
            prune_interval: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            shutdown_bound: Duration::from_secs(10),
            leader_ttl: Duration::from_secs(2),
            node_beat: Duration::from_secs(5),
        }
    }
}

/// A source of random numbers in `[0, 1)` for backoff jitter.
pub type Jitter = Arc<dyn Fn() -> f64 + Send + Sync>;

pub(crate) struct Registered {
    pub(crate) spec: JobSpec,
    pub(crate) handler: Handler,
}

pub(crate) struct InFlight {
    token: i64,
    job_id: String,
    abort: Option<AbortHandle>,
    /// Tripped when the run's lease is found gone (cancelled, or rescued): the job sees it through
    /// `io`, and the executor stops the execution.
    cancel: CancellationToken,
}

pub(crate) struct Shared {
    pub(crate) store: Store,
    /// This engine's name in leader leases; unique per process and client.
    pub(crate) node_id: String,
    /// When this engine started, ms.
    pub(crate) started_at: i64,
    /// Whether this node held the maintenance leadership at its last attempt.
    pub(crate) leading: AtomicBool,
    pub(crate) clock: SharedClock,
    pub(crate) config: EngineConfig,
    pub(crate) jitter: RwLock<Jitter>,
    pub(crate) jobs: RwLock<HashMap<String, Arc<Registered>>>,
    inflight: Mutex<HashMap<String, InFlight>>,
    /// Finished attempts handed to the completer and not recorded yet (run id → lease token).
    /// Their leases are still extended: a slow write must not let the rescuer run them again.
    recording: Mutex<HashMap<String, i64>>,
    /// Held while the completer or the heartbeat writes: both may touch the same runs, and two
    /// transactions updating the same rows in different orders deadlock on PostgreSQL.
    lease_writes: tokio::sync::Mutex<()>,
    /// Woken when a slot frees or a job is defined.
    wake: Notify,
    /// Cancelled to stop claiming.
    stop: CancellationToken,
    completions: Mutex<Option<mpsc::Sender<Completion>>>,
}

/// The running engine of one client.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    completer: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts the engine's tasks on the current runtime. With `workers` false only job
    /// definitions are kept (a send-only client).
    pub(crate) fn start(
        store: Store,
        clock: SharedClock,
        config: EngineConfig,
        workers: bool,
    ) -> Self {
        let (tx, rx) = mpsc::channel(config.concurrency.max(1) * 4);
        let shared = Arc::new(Shared {
            store,
            node_id: format!(
                "node-{}-{}",
                std::process::id(),
                &uuid::Uuid::now_v7().simple().to_string()[20..]
            ),
            leading: AtomicBool::new(false),
            started_at: clock.now_ms(),
            clock,
            config,
            jitter: RwLock::new(Arc::new(rand::random::<f64>)),
            jobs: RwLock::default(),
            inflight: Mutex::default(),
            recording: Mutex::default(),
            lease_writes: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            stop: CancellationToken::new(),
            completions: Mutex::new(Some(tx)),
        });
        let engine = Self {
            shared: Arc::clone(&shared),
            tasks: Arc::default(),
            completer: Arc::default(),
        };
        if workers {
            let tasks = vec![
                tokio::spawn(worker_loop(Arc::clone(&shared))),
                tokio::spawn(heartbeat_loop(Arc::clone(&shared))),
                tokio::spawn(maintenance::run(Arc::clone(&shared))),
                tokio::spawn(node_loop(Arc::clone(&shared))),
            ];
            if let Ok(mut t) = engine.tasks.lock() {
                *t = tasks;
            }
            if let Ok(mut c) = engine.completer.lock() {
                *c = Some(tokio::spawn(completer_loop(Arc::clone(&shared), rx)));
            }
        }
        engine
    }

    /// Validates and registers a job; fan-out sees it at once, the job table is written in the
    /// background.
    pub(crate) fn define(&self, job: Job) -> Result<JobSpec, InvalidJob> {
        let spec = self.define_local(job)?;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let store = self.shared.store.clone();
            let spec = spec.clone();
            let now = self.shared.clock.now_ms();
            handle.spawn(async move {
                if let Err(e) = store.job_define_at(spec, now).await {
                    if let Some(suppressed) = storage_failure("engine:define") {
                        tracing::warn!(error = %e, suppressed, "could not store a job definition");
                    }
                }
            });
        }
        Ok(spec)
    }

    /// Validates and registers a job in this process only: fan-out here sees it at once and this
    /// node runs it, but its definition is not written (an endpoint's jobs, whose rows the index
    /// wrote).
    pub(crate) fn define_local(&self, job: Job) -> Result<JobSpec, InvalidJob> {
        let (spec, handler) = job.validate()?;
        self.shared.store.triggers().upsert(spec.clone());
        if let Ok(mut jobs) = self.shared.jobs.write() {
            jobs.insert(
                spec.id.clone(),
                Arc::new(Registered {
                    spec: spec.clone(),
                    handler,
                }),
            );
        }
        self.shared.wake.notify_one();
        Ok(spec)
    }

    /// Stops running job `id` in this process (runs already executing finish).
    pub(crate) fn undefine(&self, id: &str) {
        if let Ok(mut jobs) = self.shared.jobs.write() {
            jobs.remove(id);
        }
        self.shared.store.triggers().remove_local(id);
    }

    /// The ids of the jobs this process defines, sorted.
    pub fn job_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .shared
            .jobs
            .read()
            .map(|j| j.keys().cloned().collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// Records now that this node is alive and which jobs it defines (it does so every
    /// [`EngineConfig::node_beat`] on its own).
    pub async fn beat(&self) -> Result<(), crate::store::Error> {
        node_beat(&self.shared).await
    }

    /// Replaces the jitter source of retry backoff (tests pin it).
    pub fn set_jitter(&self, jitter: Jitter) {
        if let Ok(mut j) = self.shared.jitter.write() {
            *j = jitter;
        }
    }

    /// The settings.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Number of runs executing now.
    pub fn in_flight(&self) -> usize {
        self.shared.inflight.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// The scheduler, rescuer and pruner, for running one pass by hand.
    pub fn maintenance(&self) -> maintenance::Maintenance {
        maintenance::Maintenance::new(Arc::clone(&self.shared))
    }

    /// This engine's node id, as it appears in leader leases.
    pub fn node_id(&self) -> &str {
        &self.shared.node_id
    }

    /// Whether this node led maintenance (scheduler, rescuer, pruner) at its last attempt.
    pub fn is_leader(&self) -> bool {
        self.shared.leading.load(Ordering::SeqCst)
    }

    /// Cancels run `id` (queued or running; see [`Store::run_cancel`]) and, when this process is
    /// executing it, stops the execution at once rather than at the next heartbeat.
    pub async fn run_cancel(&self, id: &str) -> Result<(), crate::store::Error> {
        self.shared
            .store
            .run_cancel(id, self.shared.clock.now_ms())
            .await?;
        cancel_local(&self.shared, &[id.to_string()]);
        Ok(())
    }

    /// Cancels the queued or running runs `ids` in one transaction (see [`Store::runs_bulk`]),
    /// stopping the ones executing here at once; returns how many were cancelled.
    pub async fn runs_cancel(&self, ids: Vec<String>) -> Result<usize, crate::store::Error> {
        let n = self
            .shared
            .store
            .runs_bulk(
                crate::store::BulkRunAction::Cancel,
                ids.clone(),
                self.shared.clock.now_ms(),
            )
            .await?;
        cancel_local(&self.shared, &ids);
        Ok(n)
    }

    /// Wakes the worker (after a [`crate::ManualClock`] moved, for example).
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Graceful shutdown: stop claiming, wait up to the grace period for running runs, record
    /// what finished, and release the rest so another node (or the next start) runs them.
    ///
    /// It ends within the grace period plus [`EngineConfig::shutdown_bound`] whatever the storage does: when
    /// outcomes cannot be recorded in that time (a full disk, a database gone), they are given
    /// up, and their runs are run again after their leases expire (at least once).
    pub async fn shutdown(&self) {
        let shared = &self.shared;
        shared.stop.cancel();
        let started = tokio::time::Instant::now();
        let deadline = started + shared.config.shutdown_grace;
        while self.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        let leftovers: Vec<Lease> = match shared.inflight.lock() {
            Ok(mut m) => m
                .drain()
                .map(|(run_id, f)| {
                    if let Some(a) = f.abort {
                        a.abort();
                    }
                    Lease {
                        run_id,
                        token: f.token,
                    }
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let tasks: Vec<JoinHandle<()>> = self
            .tasks
            .lock()
            .map(|mut t| t.drain(..).collect())
            .unwrap_or_default();
        for t in &tasks {
            t.abort();
        }
        // From here on the storage gets the shutdown bound in all.
        let bound = shared.config.shutdown_bound;
        let end = tokio::time::Instant::now() + bound;
        // Closing the channel lets the completer flush what it holds, then stop.
        if let Ok(mut tx) = shared.completions.lock() {
            tx.take();
        }
        let completer = self.completer.lock().ok().and_then(|mut c| c.take());
        if let Some(mut c) = completer {
            if tokio::time::timeout_at(end, &mut c).await.is_err() {
                c.abort();
                tracing::warn!(?bound, "the storage did not record the last outcomes in time; those runs run again when their leases expire");
            }
        }
        match tokio::time::timeout_at(end, shared.store.node_remove(&shared.node_id)).await {
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "could not remove this node's record; it ages out");
            }
            Ok(Ok(())) => {}
            Err(_) => skipped(bound, "removing this node's record"),
        }
        if shared.leading.swap(false, Ordering::SeqCst) {
            // Hand maintenance over now rather than when the lease expires.
            match tokio::time::timeout_at(end, self.maintenance().resign()).await {
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not release the maintenance leadership; it expires on its own")
                }
                Ok(Ok(())) => {}
                Err(_) => skipped(bound, "releasing the maintenance leadership"),
            }
        }
        if !leftovers.is_empty() {
            let n = leftovers.len();
            let release = shared.store.runs_release(leftovers, shared.clock.now_ms());
            match tokio::time::timeout_at(end, release).await {
                Ok(Ok(released)) => tracing::info!(
                    released,
                    unfinished = n,
                    "released runs still executing at shutdown"
                ),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not release runs at shutdown; their leases will expire")
                }
                Err(_) => skipped(bound, "releasing the runs still executing"),
            }
        }
    }
}

/// Says that a shutdown step was cut off at the shutdown bound.
fn skipped(bound: Duration, what: &str) {
    tracing::warn!(?bound, "shutdown: {what} took too long; skipped");
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Claim groups for the free slots: one group for jobs without a limit, one per limited job.
fn claim_groups(shared: &Shared, free: usize) -> Vec<ClaimGroup> {
    let jobs = match shared.jobs.read() {
        Ok(j) => j,
        Err(_) => return Vec::new(),
    };
    let running: HashMap<String, usize> = match shared.inflight.lock() {
        Ok(m) => m.values().fold(HashMap::new(), |mut acc, f| {
            *acc.entry(f.job_id.clone()).or_default() += 1;
            acc
        }),
        Err(_) => return Vec::new(),
    };
    let batch = free.min(shared.config.claim_batch);
    let mut unlimited = Vec::new();
    let mut groups = Vec::new();
    for (id, reg) in jobs.iter() {
        match reg.spec.concurrency {
            None => unlimited.push(id.clone()),
            Some(cap) => {
                let cap = cap as usize;
                let busy = running.get(id).copied().unwrap_or(0);
                if cap > busy {
                    groups.push(ClaimGroup {
                        jobs: vec![id.clone()],
                        limit: (cap - busy).min(batch),
                    });
                }
            }
        }
    }
    if !unlimited.is_empty() {
        groups.push(ClaimGroup {
            jobs: unlimited,
            limit: batch,
        });
    }
    groups
}

async fn worker_loop(shared: Arc<Shared>) {
    let store_wake = Arc::clone(shared.store.work_notify());
    let mut failures = 0u32;
    // Consecutive claims that found nothing although something was due: runs another node was
    // claiming at that moment (locked rows are skipped, yet still look queued). Each one doubles
    // the pause before looking again, so idle nodes do not hammer the database; a wake-up (new
    // work committed) still ends the pause at once.
    let mut contended = 0u32;
    loop {
        if shared.stop.is_cancelled() {
            return;
        }
        let in_flight = shared
            .inflight
            .lock()
            .map(|m| m.len())
            .unwrap_or(usize::MAX);
        let free = shared.config.concurrency.saturating_sub(in_flight);
        let mut full_batch = false;
        let mut claimed_none = false;
        if free > 0 {
            let groups = claim_groups(&shared, free);
            let asked: usize = groups.iter().map(|g| g.limit).sum();
            if asked > 0 {
                let now = shared.clock.now_ms();
                let params = ClaimParams {
                    now,
                    lease_until: now + ms(shared.config.lease),
                    node: Some(shared.node_id.clone()),
                    groups,
                };
                match shared.store.runs_claim(params).await {
                    Ok(runs) => {
                        failures = 0;
                        full_batch = runs.len() == asked;
                        claimed_none = runs.is_empty();
                        for run in runs {
                            executor::spawn(&shared, run);
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        if let Some(suppressed) = storage_failure("engine:claim") {
                            tracing::error!(error = %e, suppressed, "claiming runs failed; retrying");
                        }
                        let backoff = Duration::from_millis(50 * 2u64.pow(failures.min(6)));
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = shared.stop.cancelled() => return,
                        }
                        continue;
                    }
                }
            }
        }
        if full_batch {
            continue;
        }
        let wait = if free == 0 {
            shared.config.poll_interval
        } else {
            let local: Vec<String> = shared
                .jobs
                .read()
                .map(|j| j.keys().cloned().collect())
                .unwrap_or_default();
            match shared.store.next_due(local).await {
                Ok(Some(due)) => {
                    let until = (due - shared.clock.now_ms()).max(0);
                    Duration::from_millis(u64::try_from(until).unwrap_or(0))
                        .min(shared.config.poll_interval)
                }
                _ => shared.config.poll_interval,
            }
        };
        let wait = if wait.is_zero() && claimed_none {
            contended = (contended + 1).min(8);
            Duration::from_millis(1 << contended).min(shared.config.poll_interval)
        } else {
            contended = 0;
            wait
        };
        tokio::select! {
            _ = store_wake.notified() => {}
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

pub(crate) fn track(
    shared: &Shared,
    run_id: &str,
    token: i64,
    job_id: &str,
    abort: Option<AbortHandle>,
    cancel: CancellationToken,
) {
    if let Ok(mut m) = shared.inflight.lock() {
        m.insert(
            run_id.to_string(),
            InFlight {
                token,
                job_id: job_id.to_string(),
                abort,
                cancel,
            },
        );
    }
}

/// Stops the executions of `runs` in this process, whose leases are gone (a cancel): their jobs
/// see `io.is_cancelled()`, their executors drop them.
pub(crate) fn cancel_local(shared: &Shared, runs: &[String]) {
    if let Ok(m) = shared.inflight.lock() {
        for id in runs {
            if let Some(f) = m.get(id) {
                tracing::info!(run = %id, job = %f.job_id, "the run's lease is gone (cancelled); stopping its execution");
                f.cancel.cancel();
            }
        }
    }
}

pub(crate) fn set_abort(shared: &Shared, run_id: &str, abort: AbortHandle) {
    if let Ok(mut m) = shared.inflight.lock() {
        if let Some(f) = m.get_mut(run_id) {
            f.abort = Some(abort);
        }
    }
}

/// Hands a finished attempt to the completer and frees its slot.
pub(crate) async fn finish(shared: &Shared, completion: Completion) {
    let tx = shared.completions.lock().ok().and_then(|t| t.clone());
    let run_id = completion.run_id.clone();
    if let Ok(mut r) = shared.recording.lock() {
        r.insert(run_id.clone(), completion.token);
    }
    if let Some(tx) = tx {
        if tx.send(completion).await.is_err() {
            if let Ok(mut r) = shared.recording.lock() {
                r.remove(&run_id);
            }
            tracing::warn!(run = %run_id, "completer stopped; the run's lease will expire and it will run again");
        }
    }
    if let Ok(mut m) = shared.inflight.lock() {
        m.remove(&run_id);
    }
    shared.wake.notify_one();
}

async fn completer_loop(shared: Arc<Shared>, mut rx: mpsc::Receiver<Completion>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 1000).await > 0 {
        let mut failures = 0u32;
        loop {
            let written = {
                let _writing = shared.lease_writes.lock().await;
                shared.store.runs_complete(batch.clone()).await
            };
            match written {
                Ok(held) => {
                    for (c, ok) in batch.iter().zip(held) {
                        if !ok {
                            tracing::warn!(run = %c.run_id, "lease was lost before completion; the outcome of this attempt was discarded");
                        }
                    }
                    break;
                }
                Err(e) => {
                    failures += 1;
                    if let Some(suppressed) = storage_failure("engine:complete") {
                        tracing::error!(error = %e, runs = batch.len(), suppressed, "recording run outcomes failed; retrying");
                    }
                    if failures > 50 {
                        tracing::error!("giving up on these outcomes; their leases will expire and the runs will run again");
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(20))))
                        .await;
                }
            }
        }
        if let Ok(mut r) = shared.recording.lock() {
            for c in &batch {
                r.remove(&c.run_id);
            }
        }
        batch.clear();
    }
}

async fn node_beat(shared: &Shared) -> Result<(), crate::store::Error> {
    let mut jobs: Vec<String> = shared
        .jobs
        .read()
        .map(|j| j.keys().cloned().collect())
        .unwrap_or_default();
    jobs.sort();
    shared
        .store
        .node_beat(crate::store::endpoints::NodeBeat {
            id: shared.node_id.clone(),
            started_at: shared.started_at,
            now: shared.clock.now_ms(),
            jobs,
        })
        .await
}

/// Records every [`EngineConfig::node_beat`] that this node is alive and which jobs it defines.
async fn node_loop(shared: Arc<Shared>) {
    loop {
        if let Err(e) = node_beat(&shared).await {
            tracing::debug!(error = %e, "could not record this node's jobs");
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.config.node_beat) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

async fn heartbeat_loop(shared: Arc<Shared>) {
    let every = (shared.config.lease / 3).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shared.stop.cancelled() => return,
        }
        let mut leases: Vec<Lease> = match shared.inflight.lock() {
            Ok(m) => m
                .iter()
                .map(|(id, f)| Lease {
                    run_id: id.clone(),
                    token: f.token,
                })
                .collect(),
            Err(_) => continue,
        };
        if let Ok(r) = shared.recording.lock() {
            leases.extend(r.iter().map(|(id, token)| Lease {
                run_id: id.clone(),
                token: *token,
            }));
        }
        if leases.is_empty() {
            continue;
        }
        let until = shared.clock.now_ms() + ms(shared.config.lease);
        let _writing = shared.lease_writes.lock().await;
        match shared.store.runs_heartbeat(leases, until).await {
            Ok(lost) => cancel_local(&shared, &lost),
            Err(e) => {
                if let Some(suppressed) = storage_failure("engine:heartbeat") {
                    tracing::warn!(error = %e, suppressed, "extending leases failed");
                }
            }
        }
    }
}
