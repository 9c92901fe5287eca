//! The seed's API in Rust: connect, define jobs, send events (now, later, idempotently), cancel.
//!
//! A [`Client`] owns the store and, unless told otherwise, an engine running the jobs defined on it.
//! The first client connected in a process also becomes the default one used by the free functions
//! [`send_event`] and [`send_event_with`], so the seed's `sendEvent(name, payload)` works as written.

use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::clock::{SharedClock, SystemClock};
use crate::engine::{Engine, EngineConfig};
use crate::job::{Event, InvalidJob, Job};
use crate::model::{validate_event_name, Delay, InvalidEventName, Source, StoredEvent, MAX_DELAY};
use crate::store::{self, Inserted, NewEvent, Store};

/// Longest caller-supplied event id, in bytes.
pub const MAX_EVENT_ID_LEN: usize = 200;

/// An error from the client API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The event name breaks the naming rule.
    #[error(transparent)]
    InvalidEventName(#[from] InvalidEventName),
    /// The delay or delivery time is out of range.
    #[error("invalid delay: {0}")]
    InvalidDelay(String),
    /// The event id is empty, too long, or contains a NUL character.
    #[error("invalid event id: {0}")]
    InvalidId(String),
    /// The payload could not be turned into JSON.
    #[error("the payload cannot be serialized to JSON: {0}")]
    Payload(#[source] serde_json::Error),
    /// The job definition is invalid.
    #[error(transparent)]
    InvalidJob(#[from] InvalidJob),
    /// No such event or run.
    #[error("{0}")]
    NotFound(String),
    /// The event or run is not in a state that allows this.
    #[error("{0}")]
    Conflict(String),
    /// Storage failed; nothing was written.
    #[error("storage unavailable: {0}")]
    Storage(#[source] store::Error),
    /// `flare::send_event` was called before any client connected.
    #[error("no default client: call flare::Client::connect(..) first")]
    NoDefaultClient,
}

impl From<store::Error> for Error {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound { .. } => Error::NotFound(e.to_string()),
            store::Error::Conflict(msg) => Error::Conflict(msg),
            other => Error::Storage(other),
        }
    }
}

/// An event to send, with options. See [`Client::send_event_with`].
#[derive(Debug, Clone)]
pub struct SendEvent {
    pub(crate) name: String,
    pub(crate) payload: Result<Value, Arc<serde_json::Error>>,
    pub(crate) id: Option<String>,
    pub(crate) delay: Option<Delay>,
    pub(crate) deliver_at: Option<DateTime<Utc>>,
    pub(crate) context: Option<Value>,
}

impl SendEvent {
    /// An event `name` with `payload` (any serializable value).
    pub fn new<T: Serialize + ?Sized>(name: impl Into<String>, payload: &T) -> Self {
        Self {
            name: name.into(),
            payload: serde_json::to_value(payload).map_err(Arc::new),
            id: None,
            delay: None,
            deliver_at: None,
            context: None,
        }
    }

    /// A typed event: the name comes from the payload type.
    pub fn typed<E: Event>(event: &E) -> Self {
        Self::new(E::NAME, event)
    }

    /// Deliver after `delay` (at most 365 days).
    pub fn delay(mut self, delay: Delay) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Deliver at `at` (at most 365 days ahead; a past time delivers now).
    pub fn deliver_at(mut self, at: DateTime<Utc>) -> Self {
        self.deliver_at = Some(at);
        self
    }

    /// Use `id` as the event id: sending the same id again returns the stored event and starts
    /// nothing new.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Attach caller context (shown with the event, not passed to jobs).
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }
}

/// What sending one event did: the stored event, whether it is new, and, for an id that was
/// stored already, how the event sent differs from the stored one.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The stored event: the new one, or for an id sent again the one stored first.
    pub event: StoredEvent,
    /// False when the id was stored already: nothing was stored or started.
    pub created: bool,
    /// For an id stored already with another name or payload: which differ. The stored event is
    /// kept as it is; the one sent is dropped.
    pub conflict: Option<Conflict>,
}

impl Sent {
    /// True when the id was stored already (nothing new was started).
    pub fn duplicate(&self) -> bool {
        !self.created
    }
}

/// How an event sent with an id already stored differs from the stored event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// The names differ.
    pub name: bool,
    /// The payloads differ (as JSON values: key order and number spelling do not count).
    pub payload: bool,
}

impl Conflict {
    /// How `name` and `payload`, sent with an id already stored, differ from `stored`; `None`
    /// when they are the same event sent again.
    pub fn between(name: &str, payload: &Value, stored: &StoredEvent) -> Option<Conflict> {
        let c = Conflict {
            name: name != stored.name,
            payload: *payload != stored.payload,
        };
        (c.name || c.payload).then_some(c)
    }

    /// The fields that differ, by their JSON names: `name`, `payload`.
    pub fn fields(&self) -> Vec<&'static str> {
        [("name", self.name), ("payload", self.payload)]
            .into_iter()
            .filter_map(|(f, differs)| differs.then_some(f))
            .collect()
    }
}

/// What to compare a send's outcome with when its id turns out to be stored already: the name and
/// payload sent, kept only for a caller-chosen id (a generated one is never stored already).
fn resend_check(event: &SendEvent) -> Option<(String, Value)> {
    match (&event.id, &event.payload) {
        (Some(_), Ok(payload)) => Some((event.name.clone(), payload.clone())),
        _ => None,
    }
}

fn sent(inserted: Inserted, check: Option<(String, Value)>) -> Sent {
    let conflict = match (&check, inserted.created) {
        (Some((name, payload)), false) => Conflict::between(name, payload, &inserted.event),
        _ => None,
    };
    Sent {
        event: inserted.event,
        created: inserted.created,
        conflict,
    }
}

/// A new event id: time-ordered.
pub(crate) fn new_event_id() -> String {
    format!("evt_{}", uuid::Uuid::now_v7().simple())
}

/// Validates `event` and stores it (with its runs, when immediate) in one transaction.
pub(crate) async fn send_with(
    store: &Store,
    clock: &SharedClock,
    event: SendEvent,
    source: Source,
    parent_run_id: Option<String>,
) -> Result<Inserted, Error> {
    let new = prepare(event, &source, parent_run_id, clock.now_ms())?;
    let inserted = store.event_insert(new).await?;
    crate::metrics::event_inserted(&inserted);
    Ok(inserted)
}

/// Validates `event` (name, id, delay) and turns it into the row to insert, received at `now`.
pub(crate) fn prepare(
    event: SendEvent,
    source: &Source,
    parent_run_id: Option<String>,
    now: i64,
) -> Result<NewEvent, Error> {
    validate_event_name(&event.name)?;
    let payload = event.payload.map_err(|e| {
        Error::Payload(
            Arc::try_unwrap(e)
                .unwrap_or_else(|e| serde_json::Error::io(std::io::Error::other(e.to_string()))),
        )
    })?;
    let id = match event.id {
        Some(id) if id.is_empty() => return Err(Error::InvalidId("it is empty".into())),
        Some(id) if id.len() > MAX_EVENT_ID_LEN => {
            return Err(Error::InvalidId(format!(
                "it is longer than {MAX_EVENT_ID_LEN} bytes"
            )))
        }
        Some(id) if !store::storable(&id) => {
            return Err(Error::InvalidId(
                "it contains a NUL character (\\0), which cannot be stored".into(),
            ))
        }
        Some(id) => id,
        None => new_event_id(),
    };
    let max_ms = i64::try_from(MAX_DELAY.as_millis()).unwrap_or(i64::MAX);
    let deliver_at = match (event.delay, event.deliver_at) {
        (Some(_), Some(_)) => {
            return Err(Error::InvalidDelay(
                "give either a delay or a delivery time, not both".into(),
            ))
        }
        (Some(delay), None) => {
            let ms = i64::try_from(delay.as_duration().as_millis()).unwrap_or(i64::MAX);
            if ms > max_ms {
                return Err(Error::InvalidDelay("the maximum delay is 365 days".into()));
            }
            (ms > 0).then_some(now + ms)
        }
        (None, Some(at)) => {
            let at = at.timestamp_millis();
            if at - now > max_ms {
                return Err(Error::InvalidDelay(
                    "the delivery time is more than 365 days ahead".into(),
                ));
            }
            (at > now).then_some(at)
        }
        (None, None) => None,
    };
    Ok(NewEvent {
        id,
        name: event.name,
        payload,
        context: event.context,
        source: source.to_string(),
        parent_run_id,
        deliver_at,
        now,
    })
}

/// Builds a [`Client`] with non-default settings.
#[derive(Debug)]
pub struct ClientBuilder {
    url: String,
    clock: SharedClock,
    config: EngineConfig,
    workers: bool,
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

    /// Opens the store, applies migrations and starts the engine.
    pub async fn connect(self) -> Result<Client, Error> {
        let store = Store::open(&self.url).await?;
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
        self.inner.engine.define(job)?;
        Ok(())
    }

    /// Defines a job and waits until its definition is stored, so other processes (and the
    /// dashboard) see it at once.
    pub async fn register_job(&self, job: Job) -> Result<(), Error> {
        // Registered here and written once, by this call: `define` would also write it from a
        // background task, which may land after a later definition and put back an old
        // schedule (and its next tick).
        let spec = self.inner.engine.define_local(job)?;
        let now = self.inner.clock.now_ms();
        self.inner.store.job_define_at(spec, now).await?;
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
        inserted.iter().for_each(crate::metrics::event_inserted);
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
