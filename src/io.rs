//! What a running job gets besides its payload: `io.logger` and `io.send_event`.
//!
//! Log lines are kept with the attempt and stored when it finishes, in the same transaction as its
//! outcome. Events sent with `io.send_event` carry the run as their parent; their ids are derived
//! from the run id and the call order (or an explicit key), so a retried run that sends again
//! returns the event it sent the first time instead of sending a second one.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use crate::client::{send_with, Error, SendEvent};
use crate::clock::SharedClock;
use crate::job::Event;
use crate::model::{ms_to_time, Level, LogLine, Source, StoredEvent};
use crate::store::Store;

/// The run's logger. Lines are stored with the run and shown on its page.
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

/// Handed to a job's `run` with the payload.
#[derive(Clone, Debug)]
pub struct Io {
    /// The run's logger.
    pub logger: Logger,
    run_id: Arc<str>,
    event_id: Arc<str>,
    event_name: Arc<str>,
    attempt: u32,
    store: Store,
    clock: SharedClock,
    calls: Arc<AtomicU32>,
}

impl Io {
    pub(crate) fn new(
        run_id: &str,
        event_id: &str,
        event_name: &str,
        attempt: u32,
        store: Store,
        clock: SharedClock,
    ) -> Self {
        Self {
            logger: Logger::new(run_id, attempt, clock.clone()),
            run_id: Arc::from(run_id),
            event_id: Arc::from(event_id),
            event_name: Arc::from(event_name),
            attempt,
            store,
            clock,
            calls: Arc::default(),
        }
    }

    /// This run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The id of the event that started this run.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// The name of the event that started this run.
    pub fn event_name(&self) -> &str {
        &self.event_name
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Sends a chained event whose parent is this run. Sent at most once per call position, even
    /// when the run is retried.
    pub async fn send_event<T: Serialize + ?Sized>(
        &self,
        name: &str,
        payload: &T,
    ) -> Result<StoredEvent, Error> {
        self.send_event_with(SendEvent::new(name, payload)).await
    }

    /// Sends a typed chained event.
    pub async fn send<E: Event>(&self, event: &E) -> Result<StoredEvent, Error> {
        self.send_event(E::NAME, event).await
    }

    /// Sends several chained events in one transaction, all or none; each `(key, event)` gets the
    /// id `<run id>-<key>`, so answering the same keys again (a retried run) sends nothing twice.
    pub(crate) async fn send_keyed(
        &self,
        events: Vec<(String, SendEvent)>,
    ) -> Result<Vec<StoredEvent>, Error> {
        let now = self.clock.now_ms();
        let source = Source::Job(self.run_id.to_string());
        let rows = events
            .into_iter()
            .map(|(key, event)| {
                let event = event.id(format!("{}-{key}", self.run_id));
                crate::client::prepare(event, &source, Some(self.run_id.to_string()), now)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let inserted = self.store.event_insert_many(rows).await?;
        inserted.iter().for_each(crate::metrics::event_inserted);
        Ok(inserted.into_iter().map(|i| i.event).collect())
    }

    /// Sends a chained event with options. An explicit `.id(key)` is used as the idempotency key
    /// within this run instead of the call order.
    pub async fn send_event_with(&self, event: SendEvent) -> Result<StoredEvent, Error> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let key = match &event.id {
            Some(key) => format!("{}-{key}", self.run_id),
            None => format!("{}-{n}", self.run_id),
        };
        let event = event.id(key);
        send_with(
            &self.store,
            &self.clock,
            event,
            Source::Job(self.run_id.to_string()),
            Some(self.run_id.to_string()),
        )
        .await
        .map(|inserted| inserted.event)
    }
}
