//! Runs: a run's state, the run as stored, its attempts and the log lines its job wrote.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The state of a run. See `ARCHITECTURE.md` for the diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting to be claimed (at or after `runAt`).
    Queued,
    /// Claimed by a worker holding a lease.
    Running,
    /// Finished with an output.
    Succeeded,
    /// Finished with an error and no attempts left, or an invalid payload.
    Failed,
    /// Cancelled before it ran.
    Cancelled,
}

impl RunStatus {
    /// All states, in lifecycle order.
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// True for succeeded, failed and cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One execution of one job for one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Run id.
    pub id: String,
    /// The event that started it.
    pub event_id: String,
    /// The job it runs.
    pub job_id: String,
    /// The job version it was created for.
    pub job_version: String,
    /// Current state.
    pub status: RunStatus,
    /// Attempts started so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When it may next be claimed.
    pub run_at: DateTime<Utc>,
    /// When the latest attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The job's result, on success.
    pub output: Option<Value>,
    /// The latest error.
    pub error: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// The node (process) that claimed its latest attempt; `None` until claimed.
    pub node: Option<String>,
}

/// The severity of a log line written by a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something odd.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Level::Debug, Level::Info, Level::Warn, Level::Error]
            .into_iter()
            .find(|l| l.as_str() == s)
    }
}

/// A log line written by a run through `io.logger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Which attempt wrote it.
    pub attempt: u32,
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Optional structured fields.
    pub fields: Option<Value>,
    /// When it was written.
    pub at: DateTime<Utc>,
}

/// One attempt of a run, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// Attempt number, from 1.
    pub attempt: u32,
    /// How it ended: `succeeded`, `failed`, `retrying`, `lost`, `released` or `waiting` (it reached
    /// an `io.wait` not yet due; not counted as an attempt).
    pub outcome: String,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// Its error, if any.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse_their_stored_spelling() {
        assert_eq!(RunStatus::parse("queued"), Some(RunStatus::Queued));
        assert_eq!(RunStatus::parse("nope"), None);
    }
}
