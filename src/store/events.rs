//! Events in the store: the row to insert ([`NewEvent`]) and what the insert did ([`Inserted`]);
//! an event with its runs ([`EventDetail`]); the list query ([`EventQuery`]), its rows
//! ([`EventSummary`]) and an event's outcome as lists show it ([`EventStatus`]); the text both
//! backends store for a payload or context (`json_text`).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::page::{Cursor, DEFAULT_LIMIT};
use super::runs::RunCounts;
use crate::model::{Run, StoredEvent};

/// Longest payload search (`q`), in characters.
///
/// Longer than any text worth looking for (an email address has at most 254 characters, a UUID
/// 36), and short enough that checking a payload stays cheap whatever is stored: the `LIKE`
/// that decides costs up to the payload's length times the term's (both stores compare the term
/// at each position), for 256 characters over a 1 MiB payload built for it about 0.2 s on
/// SQLite and 0.6 s on PostgreSQL. Unbounded, one request with a 10,000-character term ran a
/// server out of memory (issue 23).
pub const MAX_SEARCH_CHARS: usize = 256;

/// Why a payload search is refused, if it is: longer than [`MAX_SEARCH_CHARS`].
pub fn search_refusal(text: &str) -> Option<String> {
    let n = text.chars().count();
    (n > MAX_SEARCH_CHARS).then(|| {
        format!("the payload search q has {n} characters; it may have at most {MAX_SEARCH_CHARS}")
    })
}

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

impl NewEvent {
    /// The payload and the context as the JSON text both backends store (computed on the caller's
    /// task, not on a writer).
    pub(crate) fn texts(&self) -> (String, Option<String>) {
        (
            self.payload.to_string(),
            self.context.as_ref().map(Value::to_string),
        )
    }
}

/// What an insert did.
#[derive(Debug, Clone)]
pub struct Inserted {
    /// The stored event with its run ids.
    pub event: StoredEvent,
    /// False when the id existed already (nothing new was started).
    pub created: bool,
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
    /// Jobs it matched but started no run of (over their rate limit), with the reason.
    pub skipped: Vec<Skipped>,
    /// Runs of debounced jobs it was folded into: a later event of the burst took its place.
    pub debounced: Vec<Debounced>,
    /// Runs waiting for it that it resumed (`io.wait_for_event`).
    pub resumed_runs: Vec<super::links::LinkedRun>,
    /// Runs it cancelled (their job's `cancel_on`).
    pub cancelled_runs: Vec<super::links::LinkedRun>,
}

/// A run an event was folded into by its job's debounce (`model::debounce`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Debounced {
    /// The job.
    pub job_id: String,
    /// The run, which a later event of the burst now starts.
    pub run_id: String,
}

/// A job an event matched and started no run of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// The job.
    pub job_id: String,
    /// Why: `rate limit: at most 1 run(s) per 3600000 ms for key cus_1`.
    pub reason: String,
}

/// The outcome of an event as a whole, derived from its own state and its runs' states.
///
/// The states partition events; they are decided in this order:
/// 1. `cancelled` — the event was cancelled before delivery, or every run it started was
///    cancelled (nothing ran);
/// 2. `scheduled` — delayed and not delivered yet;
/// 3. `no_runs` — delivered, but no job matched it;
/// 4. `running` — some run is queued (including waiting for a retry) or running;
/// 5. `failed` — every run finished and at least one failed;
/// 6. `succeeded` — every run finished, none failed, and at least one succeeded (runs cancelled
///    beside succeeded ones do not change that).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// Delayed, not delivered yet.
    Scheduled,
    /// Cancelled before delivery, or all of its runs were cancelled.
    Cancelled,
    /// Delivered; no job matched.
    NoRuns,
    /// Some run is queued or running.
    Running,
    /// All runs finished; at least one failed.
    Failed,
    /// All runs finished; none failed; at least one succeeded.
    Succeeded,
}

impl EventStatus {
    /// Every state.
    pub const ALL: [EventStatus; 6] = [
        EventStatus::Scheduled,
        EventStatus::Cancelled,
        EventStatus::NoRuns,
        EventStatus::Running,
        EventStatus::Failed,
        EventStatus::Succeeded,
    ];

    /// The spelling used in the API and in query parameters.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Scheduled => "scheduled",
            EventStatus::Cancelled => "cancelled",
            EventStatus::NoRuns => "no_runs",
            EventStatus::Running => "running",
            EventStatus::Failed => "failed",
            EventStatus::Succeeded => "succeeded",
        }
    }

    /// Parses [`EventStatus::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The state of `event` whose runs are counted in `runs` (the rules above).
    pub fn of(event: &StoredEvent, runs: &RunCounts) -> Self {
        if event.cancelled_at.is_some() {
            EventStatus::Cancelled
        } else if event.delivered_at.is_none() {
            EventStatus::Scheduled
        } else if runs.total() == 0 {
            EventStatus::NoRuns
        } else if runs.queued + runs.running > 0 {
            EventStatus::Running
        } else if runs.failed > 0 {
            EventStatus::Failed
        } else if runs.succeeded > 0 {
            EventStatus::Succeeded
        } else {
            EventStatus::Cancelled
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Filters of the event list. All given filters must hold.
#[derive(Debug, Clone)]
pub struct EventQuery {
    /// Exact event name.
    pub name: Option<String>,
    /// Source: matches exactly, or as the kind before a colon (`job` matches `job:run_…`,
    /// `webhook` matches `webhook:payments` and `webhook:auth`).
    pub source: Option<String>,
    /// Outcome, see [`EventStatus`].
    pub status: Option<EventStatus>,
    /// Received at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Received strictly before this time.
    pub to: Option<DateTime<Utc>>,
    /// Text the payload's JSON must contain (case-insensitive for ASCII), at most
    /// [`MAX_SEARCH_CHARS`] characters.
    pub q: Option<String>,
    /// Page size (clamped to `1..=MAX_LIMIT`).
    pub limit: usize,
    /// Start after this position (from the previous page).
    pub cursor: Option<Cursor>,
}

impl Default for EventQuery {
    fn default() -> Self {
        Self {
            name: None,
            source: None,
            status: None,
            from: None,
            to: None,
            q: None,
            limit: DEFAULT_LIMIT,
            cursor: None,
        }
    }
}

/// An event in a list: its stored fields, its outcome and its runs counted by state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSummary {
    /// The event.
    #[serde(flatten)]
    pub event: StoredEvent,
    /// Its outcome.
    pub status: EventStatus,
    /// Its runs by state.
    pub run_counts: RunCounts,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ms_to_time, RunStatus};

    fn event(delivered: bool, cancelled: bool) -> StoredEvent {
        StoredEvent {
            id: "e".into(),
            name: "a.b".into(),
            payload: Value::Null,
            context: None,
            source: "api".into(),
            timestamp: ms_to_time(0),
            deliver_at: None,
            delivered_at: delivered.then(|| ms_to_time(0)),
            cancelled_at: cancelled.then(|| ms_to_time(0)),
            parent_run_id: None,
            run_ids: Vec::new(),
        }
    }

    fn counts(pairs: &[(RunStatus, u64)]) -> RunCounts {
        let mut c = RunCounts::default();
        for (s, n) in pairs {
            c.add(*s, *n);
        }
        c
    }

    #[test]
    fn event_status_follows_the_documented_order() {
        use RunStatus::*;
        let none = RunCounts::default();
        assert_eq!(
            EventStatus::of(&event(false, true), &none),
            EventStatus::Cancelled
        );
        assert_eq!(
            EventStatus::of(&event(false, false), &none),
            EventStatus::Scheduled
        );
        assert_eq!(
            EventStatus::of(&event(true, false), &none),
            EventStatus::NoRuns
        );
        let delivered = event(true, false);
        let cases = [
            (vec![(Queued, 1), (Failed, 1)], EventStatus::Running),
            (vec![(Running, 1), (Succeeded, 1)], EventStatus::Running),
            (vec![(Failed, 1), (Succeeded, 3)], EventStatus::Failed),
            (vec![(Succeeded, 2), (Cancelled, 1)], EventStatus::Succeeded),
            (vec![(Cancelled, 2)], EventStatus::Cancelled),
        ];
        for (pairs, want) in cases {
            assert_eq!(
                EventStatus::of(&delivered, &counts(&pairs)),
                want,
                "{pairs:?}"
            );
        }
        for s in EventStatus::ALL {
            assert_eq!(EventStatus::parse(s.as_str()), Some(s));
        }
    }
}
