//! The engine: claims runnable runs, executes them, records their outcome; keeps delayed events,
//! expired leases and old data in order.
//!
//! Tasks, each small and named, each in its own file:
//! - the **worker** loop (`worker`) claims runs of locally defined jobs in batches (up to the free
//!   slots) when woken by a commit that created work, or when the next run is due;
//! - the **executor** ([`executor`]) runs one attempt: payload → job → outcome, catching panics and
//!   timeouts, and decides retry or failure with the job's [`retry::RetryPolicy`], or that the
//!   run waits ([`steps`]: durable steps, waits that end the execution). A job's body gets an
//!   `execution::Execution`; the engine never sees `crate::Io`, which the Rust API builds from it;
//! - the **completer** (`completer`) records finished attempts in batches, fenced by each claim's
//!   lease token;
//! - the **heartbeat** (`heartbeat`) extends the leases of runs still executing, and beats for
//!   this node;
//! - the **maintenance** services ([`maintenance`]): scheduler (delayed events), rescuer (expired
//!   leases), pruner (retention). Each has a `*_once` that tests call directly.
//!
//! What they share is in `shared`; the settings in `config`. This file is the [`Engine`] handle
//! and nothing a task imports: the tasks never import it back.
//!
//! The engine knows nothing of HTTP, the dashboard or `crate::Io`: it runs a job's `Handler` with
//! an `Execution`, and talks to storage through `crate::store::Store` only.

mod completer;
mod config;
pub mod execution;
pub mod executor;
mod heartbeat;
pub mod maintenance;
mod shared;
pub mod steps;
mod worker;

use completer::completer_loop;
pub use config::EngineConfig;
use heartbeat::{heartbeat_loop, node_beat, node_loop};
pub use shared::Jitter;
use shared::{cancel_local, Registered, Shared};
use worker::worker_loop;

/// The retry policy, now a noun of [`crate::model`]; kept here for the old path.
pub use crate::model::retry;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::log_throttle::storage_failure;
use crate::model::JobSpec;
use crate::store::{Lease, Store};
use execution::Handler;
pub use execution::Logger;

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
            node_id: config.node_name.clone().unwrap_or_else(default_node_name),
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

    /// Registers a job (checked by its builder, `crate::job::Job`); fan-out sees it at once, the
    /// job table is written in the background.
    pub(crate) fn define(&self, spec: JobSpec, handler: Handler) {
        self.define_local(spec.clone(), handler);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let store = self.shared.store.clone();
            let now = self.shared.clock.now_ms();
            handle.spawn(async move {
                let id = spec.id.clone();
                match store.job_define_at(spec, now).await {
                    Ok(displaced) => warn_displaced(&id, displaced.as_deref()),
                    Err(e) => {
                        if let Some(suppressed) = storage_failure("engine:define") {
                            tracing::warn!(error = %e, suppressed, "could not store a job definition");
                        }
                    }
                }
            });
        }
    }

    /// Registers a job in this process only: fan-out here sees it at once and this node runs it,
    /// but its definition is not written (an endpoint's jobs, whose rows the index wrote).
    pub(crate) fn define_local(&self, spec: JobSpec, handler: Handler) {
        self.shared.store.triggers().upsert(spec.clone());
        if let Ok(mut jobs) = self.shared.jobs.write() {
            jobs.insert(spec.id.clone(), Arc::new(Registered { spec, handler }));
        }
        self.shared.wake.notify_one();
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

/// Logs that job `id`, defined in code, displaced the job with its id of the endpoint at
/// `displaced` (one job id, one owner: [`crate::store::owners`]); nothing when it did not.
pub(crate) fn warn_displaced(id: &str, displaced: Option<&str>) {
    if let Some(url) = displaced {
        tracing::warn!(
            job = %id,
            endpoint = %url,
            "job {id} is defined in this node's code and displaces the job with this id that the \
             endpoint {url} served; the endpoint's index of {id} is refused while a node defines \
             it in code (rename one of them to keep both)"
        );
    }
}

/// The node name when none is given: the host name and the process id (`web-1-4242`), and for a
/// second engine in one process (tests, an application with two clients) `-2`, `-3`, ….
fn default_node_name() -> String {
    static ENGINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = ENGINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_string());
    let base = format!("{host}-{}", std::process::id());
    if n == 1 {
        base
    } else {
        format!("{base}-{n}")
    }
}
