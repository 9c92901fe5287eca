//! One execution of a claimed run, as the engine hands it to a job's body: which run, event and
//! attempt it is, its durable steps (`Steps`), its logger and its cancellation.
//!
//! The engine runs a job through a `Handler`: a type-erased body taking the raw payload and an
//! `Execution`. The Rust API (`crate::job::Job::run`) wraps the user's closure into a handler that
//! builds the `crate::Io` the closure expects from the execution, so the engine knows nothing of
//! `Io`, and `Io` sits above the engine.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::steps::{RunEvent, Steps};
use crate::clock::{ms_to_time, SharedClock};
use crate::model::{JobError, Level, LogLine};
use crate::store::{ClaimedRun, Lease, Store};

/// What a job body's future resolves to.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<Value, JobError>> + Send>>;

/// A type-erased job body: takes the raw payload and the execution.
pub(crate) type Handler = Arc<dyn Fn(Value, Execution) -> BoxFuture + Send + Sync>;

/// The run's logger. Lines are stored with the attempt and shown on the run's page.
#[derive(Clone, Debug)]
pub struct Logger {
    run_id: Arc<str>,
    attempt: u32,
    clock: SharedClock,
    lines: Arc<Mutex<Vec<LogLine>>>,
}

impl Logger {
    pub(crate) fn new(run_id: &str, attempt: u32, clock: SharedClock) -> Self {
        Self {
            run_id: Arc::from(run_id),
            attempt,
            clock,
            lines: Arc::default(),
        }
    }

    /// Writes a line with optional structured fields.
    pub fn log(&self, level: Level, message: impl Into<String>, fields: Option<Value>) {
        let message = message.into();
        match level {
            Level::Debug => tracing::debug!(run = %self.run_id, "{message}"),
            Level::Info => tracing::info!(run = %self.run_id, "{message}"),
            Level::Warn => tracing::warn!(run = %self.run_id, "{message}"),
            Level::Error => tracing::error!(run = %self.run_id, "{message}"),
        }
        let line = LogLine {
            attempt: self.attempt,
            level,
            message,
            fields,
            at: ms_to_time(self.clock.now_ms()),
        };
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(line);
        }
    }

    /// Writes a debug line.
    pub fn debug(&self, message: impl Into<String>) {
        self.log(Level::Debug, message, None);
    }
    /// Writes an info line.
    pub fn info(&self, message: impl Into<String>) {
        self.log(Level::Info, message, None);
    }
    /// Writes a warning.
    pub fn warn(&self, message: impl Into<String>) {
        self.log(Level::Warn, message, None);
    }
    /// Writes an error line.
    pub fn error(&self, message: impl Into<String>) {
        self.log(Level::Error, message, None);
    }

    /// Takes the lines written so far.
    pub(crate) fn take(&self) -> Vec<LogLine> {
        self.lines
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }
}

/// One execution of a claimed run (cheap to clone; the clones share steps, logger and
/// cancellation).
#[derive(Clone, Debug)]
pub(crate) struct Execution {
    pub(crate) run_id: Arc<str>,
    pub(crate) event_id: Arc<str>,
    pub(crate) event_name: Arc<str>,
    pub(crate) attempt: u32,
    pub(crate) store: Store,
    pub(crate) clock: SharedClock,
    pub(crate) steps: Arc<Steps>,
    pub(crate) logger: Logger,
    pub(crate) cancel: CancellationToken,
}

impl Execution {
    /// The execution of the claimed `run` (`run.id` claimed with `run.token`), whose event's
    /// payload is `payload` (taken out of `run`, and shared with the handler's caller).
    pub(crate) fn new(
        run: &ClaimedRun,
        payload: Arc<Value>,
        store: Store,
        clock: SharedClock,
        cancel: CancellationToken,
    ) -> Self {
        let (event_id, event_name, attempt) = (&run.event_id, &run.event_name, run.attempt);
        let event_id: Arc<str> = Arc::from(event_id.as_str());
        let event_name: Arc<str> = Arc::from(event_name.as_str());
        let run_event = RunEvent {
            id: Arc::clone(&event_id),
            name: Arc::clone(&event_name),
            payload,
        };
        let lease = Lease {
            run_id: run.id.clone(),
            token: run.token,
        };
        let run_id = run.id.as_str();
        Self {
            logger: Logger::new(run_id, attempt, clock.clone()),
            run_id: Arc::from(run_id),
            event_id,
            event_name,
            attempt,
            steps: Arc::new(Steps::new(
                store.clone(),
                clock.clone(),
                lease,
                attempt,
                run_event,
            )),
            store,
            clock,
            cancel,
        }
    }
}
