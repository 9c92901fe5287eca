//! What the engine's tasks share: the store, the clock, the settings, the jobs defined here
//! ([`Registered`]: definition and body), and the runs executing now ([`InFlight`]) with their
//! leases and cancellations.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::config::EngineConfig;
use super::execution::Handler;
use crate::clock::SharedClock;
use crate::model::JobSpec;
use crate::store::{Completion, Store};

/// A source of random numbers in `[0, 1)` for backoff jitter.
pub type Jitter = Arc<dyn Fn() -> f64 + Send + Sync>;

pub(crate) struct Registered {
    pub(crate) spec: JobSpec,
    pub(crate) handler: Handler,
}

pub(crate) struct InFlight {
    pub(crate) token: i64,
    pub(crate) job_id: String,
    pub(crate) abort: Option<AbortHandle>,
    /// Tripped when the run's lease is found gone (cancelled, or rescued): the job sees it through
    /// `io`, and the executor stops the execution.
    pub(crate) cancel: CancellationToken,
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
    pub(crate) inflight: Mutex<HashMap<String, InFlight>>,
    /// Finished attempts handed to the completer and not recorded yet (run id → lease token).
    /// Their leases are still extended: a slow write must not let the rescuer run them again.
    pub(crate) recording: Mutex<HashMap<String, i64>>,
    /// Held while the completer or the heartbeat writes: both may touch the same runs, and two
    /// transactions updating the same rows in different orders deadlock on PostgreSQL.
    pub(crate) lease_writes: tokio::sync::Mutex<()>,
    /// Woken when a slot frees or a job is defined.
    pub(crate) wake: Notify,
    /// Cancelled to stop claiming.
    pub(crate) stop: CancellationToken,
    pub(crate) completions: Mutex<Option<mpsc::Sender<Completion>>>,
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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
