//! What a run's and an event's detail link to beyond their own rows (issue 27): the event that
//! cancelled a run ([`CancelledBy`], `cancel_on`), the run that invoked it and the runs it
//! invoked with their states ([`LinkedRun`]), and the runs an event resumed (a wait for it) or
//! cancelled. Both backends read them from `event_effects` (`0031_cancel_on.sql`) and from the
//! invoked runs' events (`flare/job.invoked`, whose parent is the invoking run).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::RunStatus;

/// What an event did to a run it did not start, as stored in `event_effects`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// It resumed the run's wait for it (`io.wait_for_event`).
    Resumed,
    /// It cancelled the run (the job's `cancel_on`).
    Cancelled,
}

impl Effect {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Resumed => "resumed",
            Effect::Cancelled => "cancelled",
        }
    }
}

/// The event that cancelled a run (its job's `cancel_on`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledBy {
    /// The event's id.
    pub event_id: String,
    /// Its name.
    pub event_name: String,
    /// When it cancelled the run.
    pub at: DateTime<Utc>,
}

/// A run linked from another run's or an event's detail, with its state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkedRun {
    /// The run.
    pub run_id: String,
    /// Its job.
    pub job_id: String,
    /// Its state now.
    pub status: RunStatus,
    /// For an invoked run: the invoking step's key (`io.invoke`'s key, `<key>:<n>` for
    /// `io.invoke_all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
    /// For a run an event resumed or cancelled: when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
}

/// The step key of the invoke that made the event `event_id` of run `parent`'s child (its id
/// is `<parent>-invoke-<key>`).
pub(crate) fn invoke_key(parent: &str, event_id: &str) -> Option<String> {
    event_id
        .strip_prefix(parent)
        .and_then(|rest| rest.strip_prefix("-invoke-"))
        .map(str::to_string)
}

/// A run row read for a link: id, job, stored status, and the key or time that goes with it.
pub(crate) fn linked(
    run_id: String,
    job_id: String,
    status: &str,
    step_key: Option<String>,
    at: Option<i64>,
) -> LinkedRun {
    LinkedRun {
        run_id,
        job_id,
        status: RunStatus::parse(status).unwrap_or(RunStatus::Queued),
        step_key,
        at: at.map(crate::model::ms_to_time),
    }
}
