//! The seed's API in Rust: connect, define jobs, send events (now, later, idempotently), cancel.
//!
//! A [`Client`] owns the store and, unless told otherwise, an engine running the jobs defined on it.
//! The first client connected in a process also becomes the default one used by the free functions
//! [`send_event`] and [`send_event_with`], so the seed's `sendEvent(name, payload)` works as written.
//!
//! No HTTP here; the routes send through a `Client`.

use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::clock::{SharedClock, SystemClock};
use crate::engine::{Engine, EngineConfig};
use crate::job::Job;
use crate::model::{Event, Source, StoredEvent};
use crate::send::{prepare, resend_check, send_with, sent};
pub use crate::send::{Conflict, Error, SendEvent, Sent, MAX_EVENT_ID_LEN};
use crate::store::Store;

/// Builds a [`Client`] with non-default settings.
#[derive(Debug)]
pub struct ClientBuilder {
    url: String,
    clock: SharedClock,
    config: EngineConfig,
    workers: bool,
    paused: bool,
}

impl ClientBuilder {
    /// Use this clock (tests use [`crate::ManualClock`]).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Engine settings (concurrency, lease, retention, …).
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// Whether this client runs jobs (default true). A send-only client sets false.
    pub fn workers(mut self, on: bool) -> Self {
        self.workers = on;
        self
    }

    /// Whether to pause every stored job before the engine starts (default false): a copy of a
    /// database opened without firing its schedules' runs or calling its endpoints. Stored, so
    /// each job stays paused until resumed.
    pub fn paused(mut self, on: bool) -> Self {
        self.paused = on;
        self
    }

    /// Opens the store, applies migrations and starts the engine. With a node name set
    /// ([`EngineConfig::node_name`]), refuses one a live node has.
    pub async fn connect(self) -> Result<Client, Error> {
        let store = Store::open(&self.url).await?;
        if self.workers {
            if let Some(name) = &self.config.node_name {
                let now = self.clock.now_ms();
                if let Some(node) = store
                    .nodes_list(now)
                    .await?
                    .into_iter()
                    .find(|n| n.live && &n.id == name)
                {
                    return Err(Error::Conflict(format!(
                        "the node name {name:?} is taken by a live process (last beat {}): give \
                         each process its own --node-name/FLARE_NODE_NAME",
                        node.seen_at.format("%Y-%m-%d %H:%M:%S UTC")
                    )));
                }
            }
        }
        if self.paused {
            let n = store.jobs_pause_all().await?;
            tracing::warn!(
                paused = n,
                "--paused: every job is paused before anything runs; resume each on the jobs page"
            );
        }
        let engine = Engine::start(store.clone(), self.clock.clone(), self.config, self.workers);
        let client = Client {
            inner: Arc::new(Inner {
                store,
                clock: self.clock,
                engine,
            }),
        };
        if let Ok(mut default) = DEFAULT.write() {
            if default.is_none() {
                *default = Some(client.clone());
            }
        }
        Ok(client)
    }
}

/// A connection to Flare: send events, define jobs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    clock: SharedClock,
    engine: Engine,
}

static DEFAULT: RwLock<Option<Client>> = RwLock::new(None);

impl Client {
    /// Connects to `url` (`sqlite://flare.db`) with default settings and starts running jobs.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::builder(url).connect().await
    }

    /// A builder for non-default settings.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_string(),
            clock: Arc::new(SystemClock),
            config: EngineConfig::default(),
            workers: true,
            paused: false,
        }
    }

    /// Makes this client the process-wide default used by [`send_event`].
    pub fn make_default(&self) {
        if let Ok(mut default) = DEFAULT.write() {
            *default = Some(self.clone());
        }
    }

    /// Defines (or redefines) a job. Events sent from now on start it.
    pub fn define_job(&self, job: Job) -> Result<(), Error> {
        // Every job checked before any is defined (a failure handler comes with its job).
        let defined = job
            .with_companions()
            .into_iter()
            .map(Job::validate)
            .collect::<Result<Vec<_>, _>>()?;
        for (spec, handler) in defined {
            self.inner.engine.define(spec, handler);
        }
        Ok(())
    }

    /// Defines a job and waits until its definition is stored, so other processes (and the
    /// dashboard) see it at once.
    pub async fn register_job(&self, job: Job) -> Result<(), Error> {
        // Registered here and written once, by this call: `define` would also write it from a
        // background task, which may land after a later definition and put back an old
        // schedule (and its next tick).
        let defined = job
            .with_companions()
            .into_iter()
            .map(Job::validate)
            .collect::<Result<Vec<_>, _>>()?;
        for (spec, handler) in defined {
            self.inner.engine.define_local(spec.clone(), handler);
            let now = self.inner.clock.now_ms();
            let id = spec.id.clone();
            let displaced = self.inner.store.job_define_at(spec, now).await?;
            crate::engine::warn_displaced(&id, displaced.as_deref());
        }
        Ok(())
    }

    /// Sends `name` with `payload` now. Resolves once the event and the runs it started are
    /// committed.
    pub async fn send_event<T: Serialize + ?Sized>(
        &self,
        name: &str,
        payload: &T,
    ) -> Result<StoredEvent, Error> {
        self.send_event_with(SendEvent::new(name, payload)).await
    }

    /// Sends a typed event; the name comes from its type.
    pub async fn send<E: Event>(&self, event: &E) -> Result<StoredEvent, Error> {
        self.send_event_with(SendEvent::typed(event)).await
    }

    /// Sends an event with options (delay, delivery time, id, context).
    pub async fn send_event_with(&self, event: SendEvent) -> Result<StoredEvent, Error> {
        Ok(self.send_inserted(event, Source::Api).await?.event)
    }

    /// Sends on behalf of `source`, telling whether the event was new and, for an id sent again,
    /// whether its name or payload differ from the stored event's. For the HTTP routes.
    pub async fn send_inserted(&self, event: SendEvent, source: Source) -> Result<Sent, Error> {
        let check = resend_check(&event);
        let inserted = send_with(&self.inner.store, &self.inner.clock, event, source, None).await?;
        Ok(sent(inserted, check))
    }

    /// Sends several events on behalf of `source` in ONE transaction: either all are stored (with
    /// their runs) or none is. Every event is validated first; the first invalid one fails the
    /// whole batch and nothing is stored. Results are in the order given.
    pub async fn send_batch(
        &self,
        events: Vec<SendEvent>,
        source: Source,
    ) -> Result<Vec<Sent>, Error> {
        let events = events.into_iter().map(|e| (e, source.clone())).collect();
        self.send_batch_from(events).await
    }

    /// [`Client::send_batch`] with a source per event (bulk replays: `replay:<id>` each).
    pub async fn send_batch_from(
        &self,
        events: Vec<(SendEvent, Source)>,
    ) -> Result<Vec<Sent>, Error> {
        let now = self.inner.clock.now_ms();
        let checks: Vec<_> = events.iter().map(|(e, _)| resend_check(e)).collect();
        let rows = events
            .into_iter()
            .map(|(e, source)| prepare(e, &source, None, now))
            .collect::<Result<Vec<_>, _>>()?;
        let inserted = self.inner.store.event_insert_many(rows).await?;
        inserted.iter().for_each(crate::send::counted);
        Ok(inserted
            .into_iter()
            .zip(checks)
            .map(|(i, c)| sent(i, c))
            .collect())
    }

    /// Cancels a scheduled event that has not been delivered yet.
    pub async fn cancel_event(&self, id: &str) -> Result<StoredEvent, Error> {
        Ok(self
            .inner
            .store
            .event_cancel(id, self.inner.clock.now_ms())
            .await?)
    }

    /// Looks an event up, with the ids of the runs it started.
    pub async fn event(&self, id: &str) -> Result<Option<StoredEvent>, Error> {
        Ok(self.inner.store.event_get(id).await?)
    }

    /// The store, for queries.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Stops claiming, lets running runs finish within the grace period, releases the rest.
    pub async fn shutdown(&self) {
        self.inner.engine.shutdown().await;
    }
}

fn default_client() -> Result<Client, Error> {
    DEFAULT
        .read()
        .ok()
        .and_then(|d| d.clone())
        .ok_or(Error::NoDefaultClient)
}

/// Sends an event through the default client: the seed's `sendEvent(name, payload)`.
pub async fn send_event<T: Serialize + ?Sized>(
    name: &str,
    payload: &T,
) -> Result<StoredEvent, Error> {
    default_client()?.send_event(name, payload).await
}

/// Sends an event with options through the default client.
pub async fn send_event_with(event: SendEvent) -> Result<StoredEvent, Error> {
    default_client()?.send_event_with(event).await
}
