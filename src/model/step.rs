//! Durable steps of a run (`io.run_task`, `io.wait`, `io.send_event`), as stored.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RunStatus;

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
    /// An ended invoke step's outcome, typed, in place of `output`: how the SQLite store's read
    /// for a replay ([`crate::store::Store::run_steps_by_key`]) hands a fan-in's parent thousands
    /// of children without building an object for each. Never serialized: whatever shows or
    /// tells a step reads [`Step::invoked`], or takes [`Step::with_output`] first.
    #[serde(skip)]
    pub outcome: Option<Invoked>,
}

impl Step {
    /// An invoke step's ended child: the typed [`Step::outcome`], else read from `output`
    /// (`{runId, status, output, error}`); `None` while it runs, or after a timeout (`null`).
    pub fn invoked(&self) -> Option<Cow<'_, Invoked>> {
        match (&self.outcome, &self.output) {
            (Some(outcome), _) => Some(Cow::Borrowed(outcome)),
            (None, Some(output)) => Invoked::from_json(output).map(Cow::Owned),
            (None, None) => None,
        }
    }

    /// The step as stored and shown: a typed [`Step::outcome`] moved into `output`.
    pub fn with_output(mut self) -> Self {
        if let Some(outcome) = self.outcome.take() {
            self.output = Some(outcome.into_json());
        }
        self
    }
}

/// How an invoked run ended, as its caller's invoke step holds it (stored and shown as
/// `{runId, status, output, error}`).
#[derive(Debug, Clone, PartialEq)]
pub struct Invoked {
    /// The child run.
    pub run_id: String,
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub status: RunStatus,
    /// Its output (`null` unless it succeeded with one).
    pub output: Value,
    /// Its error, unless it succeeded.
    pub error: Option<String>,
}

impl Invoked {
    /// The stored shape, its parts moved in.
    pub fn into_json(self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("runId".into(), Value::String(self.run_id));
        map.insert("status".into(), Value::String(self.status.as_str().into()));
        map.insert("output".into(), self.output);
        map.insert(
            "error".into(),
            self.error.map_or(Value::Null, Value::String),
        );
        Value::Object(map)
    }

    /// Reads the stored shape: `None` for anything else (`null` after a timeout, `{runId}`
    /// while the child runs).
    pub fn from_json(stored: &Value) -> Option<Self> {
        let status =
            RunStatus::parse(stored.get("status")?.as_str()?).filter(|s| s.is_terminal())?;
        Some(Self {
            run_id: stored.get("runId")?.as_str()?.to_string(),
            status,
            output: stored.get("output").cloned().unwrap_or(Value::Null),
            error: stored
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    /// [`Invoked::from_json`] from the stored JSON text, read straight into its fields: `None`
    /// also for a text with fields of its own (kept as it is stored).
    pub fn from_json_text(text: &str) -> Option<Self> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Stored {
            run_id: String,
            status: RunStatus,
            #[serde(default)]
            output: Value,
            #[serde(default)]
            error: Option<String>,
        }
        let stored: Stored = serde_json::from_str(text).ok()?;
        stored.status.is_terminal().then_some(Self {
            run_id: stored.run_id,
            status: stored.status,
            output: stored.output,
            error: stored.error,
        })
    }

    /// What the caller's step fails with unless the child succeeded.
    pub fn failure(&self) -> Option<String> {
        (self.status != RunStatus::Succeeded).then(|| {
            format!(
                "run {} {}: {}",
                self.run_id,
                self.status.as_str(),
                self.error.as_deref().unwrap_or("no error given")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn invoke_step(output: Option<Value>, outcome: Option<Invoked>) -> Step {
        Step {
            key: "k".into(),
            kind: StepKind::Invoke,
            status: StepStatus::Succeeded,
            attempt: 1,
            started_at: crate::model::ms_to_time(1_000),
            finished_at: None,
            duration_ms: None,
            wait_until: None,
            output,
            error: None,
            label: None,
            outcome,
        }
    }

    #[test]
    fn an_invoke_steps_outcome_reads_the_same_typed_or_stored() {
        let failed = Invoked {
            run_id: "run_1".into(),
            status: RunStatus::Failed,
            output: Value::Null,
            error: Some("boom".into()),
        };
        let stored = json!({"runId": "run_1", "status": "failed", "output": null, "error": "boom"});
        assert_eq!(failed.clone().into_json(), stored);
        assert_eq!(Invoked::from_json(&stored).as_ref(), Some(&failed));
        assert_eq!(failed.failure().as_deref(), Some("run run_1 failed: boom"));

        let typed = invoke_step(None, Some(failed.clone()));
        assert_eq!(typed.invoked().as_deref(), Some(&failed));
        // Shown and stored as the JSON it stands for; never serialized typed.
        let shown = typed.with_output();
        assert_eq!(shown.outcome, None);
        assert_eq!(shown.output.as_ref(), Some(&stored));
        assert_eq!(shown.invoked().as_deref(), Some(&failed));
        assert_eq!(serde_json::to_value(&shown).unwrap()["output"], stored);

        let succeeded =
            json!({"runId": "run_2", "status": "succeeded", "output": {"n": 2}, "error": null});
        let read = Invoked::from_json(&succeeded).unwrap();
        assert_eq!(read.output, json!({"n": 2}));
        assert_eq!(read.failure(), None);
        assert_eq!(read.into_json(), succeeded);
    }

    #[test]
    fn a_running_or_timed_out_child_has_no_outcome() {
        for output in [json!({"runId": "run_1"}), Value::Null] {
            assert_eq!(invoke_step(Some(output), None).invoked(), None);
        }
        assert_eq!(invoke_step(None, None).invoked(), None);
        let running = json!({"runId": "run_1", "status": "running", "output": null, "error": null});
        assert_eq!(Invoked::from_json(&running), None);
        assert_eq!(Invoked::from_json_text(&running.to_string()), None);
        for text in [
            "null",
            r#"{"runId": "run_1"}"#,
            "{",
            r#"{"runId": "run_1", "status": "failed", "extra": 1}"#,
        ] {
            assert_eq!(Invoked::from_json_text(text), None, "{text}");
        }
    }
}
