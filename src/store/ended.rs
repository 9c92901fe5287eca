//! The events Flare sends when a run ends badly: `flare/run.failed` (its last attempt failed, or
//! its lease expired with no attempt left) and `flare/run.cancelled`, source `flare`, payload
//! `{runId, jobId, jobVersion, eventId, eventName, attempt, error}`. Each backend inserts it in
//! the transaction that writes the run's final state, through the ordinary insert (so jobs
//! trigger on it and waits resume on it). Its id names the run and the attempt, so a final state
//! written once sends one event; runs of events named `flare/…` send none (no loops).

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::events::NewEvent;

/// The name of the event sent when a run fails for good.
pub const RUN_FAILED: &str = "flare/run.failed";

/// The name of the event sent when a run is cancelled.
pub const RUN_CANCELLED: &str = "flare/run.cancelled";

/// The source of the events Flare sends itself.
pub const FLARE_SOURCE: &str = "flare";

/// A run that just reached `failed` or `cancelled`, as its event tells it.
#[derive(Debug, Clone)]
pub(crate) struct RunEnded {
    pub(crate) run_id: String,
    pub(crate) job_id: String,
    pub(crate) job_version: String,
    pub(crate) event_id: String,
    pub(crate) event_name: String,
    pub(crate) attempt: u32,
    pub(crate) error: Option<String>,
    pub(crate) cancelled: bool,
}

impl RunEnded {
    /// The event to insert at `now`; `None` for a run of a `flare/…` event.
    pub(crate) fn event(&self, now: i64) -> Option<NewEvent> {
        if self.event_name.starts_with("flare/") {
            return None;
        }
        let name = if self.cancelled {
            RUN_CANCELLED
        } else {
            RUN_FAILED
        };
        let kind = if self.cancelled {
            "cancelled"
        } else {
            "failed"
        };
        Some(NewEvent {
            id: format!("flare-run-{kind}-{}-{}", self.run_id, self.attempt),
            name: name.to_string(),
            payload: json!({
                "runId": self.run_id,
                "jobId": self.job_id,
                "jobVersion": self.job_version,
                "eventId": self.event_id,
                "eventName": self.event_name,
                "attempt": self.attempt,
                "error": self.error,
            }),
            context: None,
            source: FLARE_SOURCE.to_string(),
            parent_run_id: Some(self.run_id.clone()),
            deliver_at: None,
            now,
        })
    }
}

/// The payload of `flare/run.failed` and `flare/run.cancelled`: what a failure handler
/// ([`crate::Job::on_failure`]) gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFailure {
    /// The run that failed or was cancelled.
    pub run_id: String,
    /// Its job.
    pub job_id: String,
    /// The job's version it ran.
    pub job_version: String,
    /// The event that started it.
    pub event_id: String,
    /// That event's name.
    pub event_name: String,
    /// Its last attempt's number (attempts counted when it was cancelled).
    pub attempt: u32,
    /// Its last error; for a cancellation, why when Flare knows (expired before it started,
    /// cancelled by an event, its endpoint job removed), else none.
    pub error: Option<String>,
}
