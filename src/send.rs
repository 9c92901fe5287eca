//! Sending an event, for [`crate::Client`] and [`crate::Io`] alike: [`SendEvent`] (name,
//! payload and options), its validation into the row to insert (`prepare`: name, id, delay),
//! the insert (`send_with`), what a send did ([`Sent`], [`Conflict`]), and the Rust API's
//! [`Error`].
//!
//! It knows the store's insert and nothing of the engine or HTTP.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::clock::SharedClock;
use crate::model::{
    validate_event_name, Delay, Event, InvalidEventName, InvalidJob, Source, StoredEvent, MAX_DELAY,
};
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
    /// The database was migrated by a newer Flare (its schema is past this binary's last
    /// migration): refused at connect, nothing used. Upgrade this binary.
    #[error("{0}")]
    SchemaTooNew(#[source] store::Error),
    /// `flare::send_event` was called before any client connected.
    #[error("no default client: call flare::Client::connect(..) first")]
    NoDefaultClient,
}

impl From<store::Error> for Error {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound { .. } => Error::NotFound(e.to_string()),
            store::Error::Conflict(msg) => Error::Conflict(msg),
            e @ store::Error::SchemaTooNew { .. } => Error::SchemaTooNew(e),
            other => Error::Storage(other),
        }
    }
}

/// An event to send, with options. See [`crate::Client::send_event_with`].
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
pub(crate) fn resend_check(event: &SendEvent) -> Option<(String, Value)> {
    match (&event.id, &event.payload) {
        (Some(_), Ok(payload)) => Some((event.name.clone(), payload.clone())),
        _ => None,
    }
}

pub(crate) fn sent(inserted: Inserted, check: Option<(String, Value)>) -> Sent {
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
    counted(&inserted);
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

/// Counts `inserted` in the metrics when it is a new event (call it after the commit).
pub(crate) fn counted(inserted: &Inserted) {
    if inserted.created {
        crate::metrics::event_received(&inserted.event.source);
    }
}
