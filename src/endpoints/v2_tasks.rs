//! A Trigger.dev v2 run's tasks as Flare holds them: what the SDK sends to create one
//! ([`NewTask`]), its states, the `ServerTask` and `CachedTask` Flare answers, and how a stored
//! step reads back as a task. Each task is a durable step of the run, keyed by the SDK's
//! idempotency key; its id is derived from the run and the key, so it is the same in every
//! execution. The execution that creates, completes and fails them is
//! [`super::v2_execution`]; callback tasks are [`super::v2_callbacks`].

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::v2_callbacks::{self as callbacks, Callback, Ended, Resumes};
use crate::model::{ms_to_time, Level, Step, StepKind, StepStatus};

/// Largest task output accepted, in bytes (serialized).
pub const MAX_TASK_OUTPUT_BYTES: usize = 256 * 1024;

/// Step keys of Flare's own waits (a task retry, a rate limit): not tasks, never sent to the SDK.
pub(super) const INTERNAL_PREFIX: &str = "flare:";

/// Why a task call was refused.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// No such run executing here, or no such task.
    #[error("{0}")]
    NotFound(String),
    /// The run is not executing, or the task is not in a state for this call.
    #[error("{0}")]
    Conflict(String),
    /// The body is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// The output is too large.
    #[error("{0}")]
    TooLarge(String),
    /// A v2 feature Flare does not have.
    #[error("{0}")]
    Unsupported(String),
}

/// The body of `POST /api/v1/runs/{runId}/tasks` (`RunTaskBodyInput`), as far as Flare reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewTask {
    /// The SDK's key (a hash of the run, the parent task and the cache key).
    pub idempotency_key: String,
    /// Display name (`log`, `wait`, `Send Event`, or the user's).
    #[serde(default)]
    pub name: Option<String>,
    /// The task's key as the job gave it (`io.runTask("charge", …)`: `charge`), of which
    /// `idempotency_key` is a hash.
    #[serde(default)]
    pub display_key: Option<String>,
    /// A task without a callback (logs, waits).
    #[serde(default)]
    pub noop: bool,
    /// Wait until then.
    #[serde(default)]
    pub delay_until: Option<chrono::DateTime<chrono::Utc>>,
    /// Shown with the task; a log line's fields.
    #[serde(default)]
    pub params: Option<Value>,
    /// A log line's message.
    #[serde(default)]
    pub description: Option<String>,
    /// Icon.
    #[serde(default)]
    pub icon: Option<String>,
    /// The enclosing task.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Display properties (a log line's level).
    #[serde(default)]
    pub properties: Option<Value>,
    /// `fetch…` operations run by the platform.
    #[serde(default)]
    pub operation: Option<String>,
    /// A callback URL the task waits on.
    #[serde(default)]
    pub callback: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Waiting,
    Running,
    Completed,
    Errored,
}

impl Status {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Status::Waiting => "WAITING",
            Status::Running => "RUNNING",
            Status::Completed => "COMPLETED",
            Status::Errored => "ERRORED",
        }
    }
}

/// A task of the execution in progress.
#[derive(Debug, Clone)]
pub(super) struct Task {
    pub id: String,
    pub key: String,
    pub name: String,
    pub kind: StepKind,
    pub noop: bool,
    pub status: Status,
    pub attempts: u32,
    pub output: Option<Value>,
    pub error: Option<String>,
    pub delay_until: Option<i64>,
    pub started_at: i64,
    pub completed_at: Option<i64>,
    pub parent_id: Option<String>,
    pub params: Option<Value>,
    pub description: Option<String>,
    pub icon: Option<String>,
    /// What the run page shows: its name and key (the step key is a hash).
    pub label: Option<String>,
    /// A callback task waiting: its token and what resumes it.
    pub callback: Option<Callback>,
}

/// A v2 task's label on the run page: its name, and its key when that says more.
pub(super) fn task_label(name: &str, display_key: Option<&str>) -> String {
    match display_key.filter(|k| !k.is_empty() && *k != name) {
        Some(key) => format!("{name} · {key}"),
        None => name.to_string(),
    }
}

impl Task {
    /// Trigger.dev's `ServerTask`; a waiting callback task's `callbackUrl` on Flare at `base`.
    pub fn server_task(&self, base: Option<&str>) -> Value {
        let callback_url = match (&self.callback, base) {
            (Some(c), Some(base)) if self.status == Status::Waiting => {
                Some(callbacks::url(base, &c.token))
            }
            _ => None,
        };
        json!({
            "id": self.id,
            "idempotencyKey": self.key,
            "name": self.name,
            "icon": self.icon,
            "noop": self.noop,
            "status": self.status.as_str(),
            "attempts": self.attempts,
            "startedAt": ms_to_time(self.started_at),
            "completedAt": self.completed_at.map(ms_to_time),
            "delayUntil": self.delay_until.map(ms_to_time),
            "description": self.description,
            "params": self.params,
            "output": self.output,
            "error": self.error,
            "parentId": self.parent_id,
            "callbackUrl": callback_url,
        })
    }

    /// Whether a new execution runs the task again when the SDK asks for it: an errored task
    /// that is not a callback task (a callback task that timed out stays errored).
    pub fn runs_again(&self) -> bool {
        self.status == Status::Errored && !callbacks::is_callback_kind(self.kind)
    }

    /// Trigger.dev's `CachedTask`.
    pub fn cached(&self) -> Value {
        json!({
            "id": self.id,
            "idempotencyKey": self.key,
            "status": self.status.as_str(),
            "noop": self.noop,
            "output": self.output,
            "parentId": self.parent_id,
        })
    }

    /// A task as a stored step left it (an ended callback task's `Ended::Run` output still
    /// to be read as a `RunNotification`, see [`Task::ended_run`]).
    pub fn from_step(run_id: &str, step: &Step) -> Option<Self> {
        if step.key.starts_with(INTERNAL_PREFIX) {
            return None;
        }
        let mut status = match step.status {
            StepStatus::Succeeded => Status::Completed,
            // A child that did not succeed ended its invoke step (read as a `RunNotification`).
            StepStatus::Failed if step.kind == StepKind::Invoke => Status::Completed,
            StepStatus::Failed => Status::Errored,
            _ => Status::Waiting,
        };
        let attempts = step
            .output
            .as_ref()
            .filter(|_| status == Status::Errored)
            .and_then(|o| o.get("attempts"))
            .and_then(Value::as_u64)
            .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
        let mut output = if status == Status::Completed {
            step.output.clone()
        } else {
            None
        };
        let mut error = step.error.clone();
        let mut callback = None;
        if callbacks::is_callback_kind(step.kind) {
            match status {
                Status::Waiting => {
                    let started = step.started_at.timestamp_millis();
                    callback = step
                        .output
                        .as_ref()
                        .and_then(|o| o.get("token"))
                        .and_then(Value::as_str)
                        .map(|token| Callback {
                            token: token.to_string(),
                            since: started,
                            until: step.wait_until.map_or(started, |t| t.timestamp_millis()),
                            // The SDK names the event or the run again when it asks for the task.
                            resumes: Resumes::Request,
                        });
                }
                Status::Completed => match callbacks::ended(step.kind, step.output.as_ref()) {
                    Ended::TimedOut => {
                        status = Status::Errored;
                        output = Some(json!(callbacks::TIMED_OUT));
                        error = Some(callbacks::TIMED_OUT.to_string());
                    }
                    Ended::Output(o) | Ended::Run(o) => {
                        output = Some(o);
                        // An invoke step's error says why its child failed: in the notification.
                        error = None;
                    }
                },
                _ => {}
            }
        }
        Some(Task {
            id: task_id(run_id, &step.key),
            key: step.key.clone(),
            name: step.kind.as_str().to_string(),
            kind: step.kind,
            noop: step.kind == StepKind::Wait,
            status,
            attempts,
            output,
            error,
            delay_until: step.wait_until.map(|t| t.timestamp_millis()),
            started_at: step.started_at.timestamp_millis(),
            completed_at: step.finished_at.map(|t| t.timestamp_millis()),
            parent_id: None,
            params: None,
            description: None,
            icon: None,
            label: None,
            callback,
        })
    }

    /// The child run's end (`{runId, status, output, error}`) of a completed task that waited
    /// for it, to be read as a `RunNotification`.
    pub fn ended_run(&self) -> Option<&Value> {
        (self.kind == StepKind::Invoke && self.status == Status::Completed)
            .then_some(self.output.as_ref())
            .flatten()
    }
}

/// `task_` and 24 hex digits of the run id and key: the same task has the same id in every
/// execution.
pub fn task_id(run_id: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{run_id}\n{key}").as_bytes());
    format!("task_{}", &hex::encode(digest)[..24])
}

/// A log line's level, from the task's `Level` property.
pub(super) fn log_level(properties: Option<&Value>) -> Level {
    let text = properties
        .and_then(Value::as_array)
        .and_then(|p| {
            p.iter()
                .find(|p| p.get("label").and_then(Value::as_str) == Some("Level"))
        })
        .and_then(|p| p.get("text"))
        .and_then(Value::as_str)
        .unwrap_or("INFO");
    match text {
        "DEBUG" | "LOG" => Level::Debug,
        "WARN" => Level::Warn,
        "ERROR" => Level::Error,
        _ => Level::Info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_stable_per_run_and_key() {
        assert_eq!(task_id("r1", "k"), task_id("r1", "k"));
        assert_ne!(task_id("r1", "k"), task_id("r2", "k"));
        assert!(task_id("r1", "k").starts_with("task_"));
    }

    #[test]
    fn log_levels_come_from_the_level_property() {
        let p = json!([{"label": "Level", "text": "WARN"}]);
        assert_eq!(log_level(Some(&p)), Level::Warn);
        assert_eq!(log_level(None), Level::Info);
    }
}
