//! Durable steps of a run (`io.run_task`, `io.wait`, `io.send_event`), as stored.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run's steps by key, as an execution replays them: a fan-in's parent looks up thousands, so
/// the keys are hashed with `foldhash` (seeded per process) rather than SipHash.
pub type StepsByKey = std::collections::HashMap<String, Step, foldhash::fast::RandomState>;

/// What a durable step of a run is (see [`crate::Io::run_task`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// `io.run_task`: a closure whose result is stored.
    Task,
    /// `io.wait` / `io.wait_until`: the run sleeps until a due time, holding no worker.
    Wait,
    /// `io.send_event`: a chained event.
    Event,
    /// `io.wait_for_event`: the run sleeps until a matching event arrives or the timeout passes.
    EventWait,
    /// `io.invoke`: the run sleeps until the job run it started ends, or the timeout passes.
    Invoke,
    /// `io.callback`: the run sleeps until its callback URL is posted to, or the timeout passes.
    Callback,
}

impl StepKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Task => "task",
            StepKind::Wait => "wait",
            StepKind::Event => "event",
            StepKind::EventWait => "event_wait",
            StepKind::Invoke => "invoke",
            StepKind::Callback => "callback",
        }
    }
    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            StepKind::Task,
            StepKind::Wait,
            StepKind::Event,
            StepKind::EventWait,
            StepKind::Invoke,
            StepKind::Callback,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Done: its output is stored and is returned instead of running it again.
    Succeeded,
    /// Its last try failed (it runs again in the run's next attempt).
    Failed,
    /// A wait whose due time has not been passed yet.
    Waiting,
}

impl StepStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Waiting => "waiting",
        }
    }
    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            StepStatus::Succeeded,
            StepStatus::Failed,
            StepStatus::Waiting,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// One durable step of a run, as stored: unique by key within the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The key the job gave it, unique within the run (`event:<n>` or `event:<id>` for a chained
    /// event).
    pub key: String,
    /// Task, wait or event.
    pub kind: StepKind,
    /// Succeeded, failed or waiting.
    pub status: StepStatus,
    /// The attempt of the run that last ran it.
    pub attempt: u32,
    /// When it last started.
    pub started_at: DateTime<Utc>,
    /// When it ended (succeeded or failed); `None` while a wait is pending.
    pub finished_at: Option<DateTime<Utc>>,
    /// `finished_at - started_at`, ms.
    pub duration_ms: Option<i64>,
    /// A wait's due time (a wait for an event: its timeout).
    pub wait_until: Option<DateTime<Utc>>,
    /// A task's stored result (a chained event's `{"eventId": …}`; a wait for an event: the
    /// event it resumed with, `null` on timeout).
    pub output: Option<Value>,
    /// The error of a failed task.
    pub error: Option<String>,
    /// A display label for a step whose key says little (a Trigger.dev v2 task: its name and
    /// key; its step key is the SDK's idempotency hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}
