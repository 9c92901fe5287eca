//! Runs of Trigger.dev v2 jobs: the job body that executes a run at its endpoint
//! (`EXECUTE_JOB`, then each `RunJobResponse` status mapped onto Flare's outcomes and durable
//! steps), and the tasks the SDK creates, completes and fails while an execution is in progress
//! (`POST /api/v1/runs/{runId}/tasks…`, served by `crate::http::trigger_dev_v2`).
//!
//! - **Tasks are durable steps** of the run, keyed by the SDK's `idempotencyKey`. A completed
//!   task is written at once (fenced by the execution's lease, as `io.run_task` is) and sent back
//!   in the next execution's `tasks`, so a retried or resumed run does not repeat it. Task ids are
//!   derived from the run and the key, so they are stable across executions.
//! - **Only the run's current execution writes its tasks**: the execution registers itself here
//!   while it calls the endpoint; a task call for a run that is not executing on this node is a
//!   409.
//! - **`io.wait`** is a task with `delayUntil`: it is answered `WAITING`, the SDK answers
//!   `RESUME_WITH_TASK`, and the execution suspends on a durable wait (the run holds no worker,
//!   the attempt is not counted, it survives restarts). The next execution completes the wait.
//! - **`io.logger.*`** are `noop` tasks named `log`: their description and params become the
//!   run's log lines, at their level.
//! - **`io.sendEvent`** is a task named `Send Event`: Flare sends the event itself, as a chained
//!   event whose parent is the run (idempotent per task), and answers the task completed with
//!   the event, so the SDK does not send it again through `POST /api/v1/events` (which could not
//!   know the run).
//! - **Bad answers** (an unknown task id, an output over [`MAX_TASK_OUTPUT_BYTES`], a task call
//!   of another kind than expected) are refused to the SDK with a clear error and remembered: the
//!   attempt then fails with that error instead of whatever the SDK made of the refusal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::caller::Caller;
use super::reports::Reports;
use super::trigger_dev_v2::{self as v2, RunJob, RunJobResponse};
use crate::client::SendEvent;
use crate::clock::SharedClock;
use crate::engine::steps::Steps;
use crate::io::Io;
use crate::model::JobError;
use crate::model::{ms_to_time, Level, Source, Step, StepKind, StepStatus};
use crate::store::Store;

/// Largest task output accepted, in bytes (serialized).
pub const MAX_TASK_OUTPUT_BYTES: usize = 256 * 1024;

/// Most `EXECUTE_JOB` calls in one attempt (yields and auto-yields).
pub const MAX_CALLS_PER_ATTEMPT: usize = 100;

/// Step keys of Flare's own waits (a task retry, a rate limit): not tasks, never sent to the SDK.
const INTERNAL_PREFIX: &str = "flare:";

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
enum Status {
    Waiting,
    Running,
    Completed,
    Errored,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Waiting => "WAITING",
            Status::Running => "RUNNING",
            Status::Completed => "COMPLETED",
            Status::Errored => "ERRORED",
        }
    }
}

#[derive(Debug, Clone)]
struct Task {
    id: String,
    key: String,
    name: String,
    kind: StepKind,
    noop: bool,
    status: Status,
    attempts: u32,
    output: Option<Value>,
    error: Option<String>,
    delay_until: Option<i64>,
    started_at: i64,
    completed_at: Option<i64>,
    parent_id: Option<String>,
    params: Option<Value>,
    description: Option<String>,
    icon: Option<String>,
    /// What the run page shows: its name and key (the step key is a hash).
    label: Option<String>,
}

/// A v2 task's label on the run page: its name, and its key when that says more.
fn task_label(name: &str, display_key: Option<&str>) -> String {
    match display_key.filter(|k| !k.is_empty() && *k != name) {
        Some(key) => format!("{name} · {key}"),
        None => name.to_string(),
    }
}

impl Task {
    /// Trigger.dev's `ServerTask`.
    fn server_task(&self) -> Value {
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
        })
    }

    /// Trigger.dev's `CachedTask`.
    fn cached(&self) -> Value {
        json!({
            "id": self.id,
            "idempotencyKey": self.key,
            "status": self.status.as_str(),
            "noop": self.noop,
            "output": self.output,
            "parentId": self.parent_id,
        })
    }

    /// A task as a stored step left it.
    fn from_step(run_id: &str, step: &Step) -> Option<Self> {
        if step.key.starts_with(INTERNAL_PREFIX) {
            return None;
        }
        let status = match step.status {
            StepStatus::Succeeded => Status::Completed,
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
        Some(Task {
            id: task_id(run_id, &step.key),
            key: step.key.clone(),
            name: step.kind.as_str().to_string(),
            kind: step.kind,
            noop: step.kind == StepKind::Wait,
            status,
            attempts,
            output: if status == Status::Completed {
                step.output.clone()
            } else {
                None
            },
            error: step.error.clone(),
            delay_until: step.wait_until.map(|t| t.timestamp_millis()),
            started_at: step.started_at.timestamp_millis(),
            completed_at: step.finished_at.map(|t| t.timestamp_millis()),
            parent_id: None,
            params: None,
            description: None,
            icon: None,
            label: None,
        })
    }
}

/// `task_` and 24 hex digits of the run id and key: the same task has the same id in every
/// execution.
pub fn task_id(run_id: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{run_id}\n{key}").as_bytes());
    format!("task_{}", &hex::encode(digest)[..24])
}

/// One execution of a v2 run in progress: the run's tasks and what went wrong with the SDK's
/// calls.
pub struct Execution {
    run_id: String,
    io: Io,
    steps: Arc<Steps>,
    store: Store,
    clock: SharedClock,
    tasks: tokio::sync::Mutex<Vec<Task>>,
    problems: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Execution {
    fn problem(&self, message: String) {
        tracing::warn!(run = %self.run_id, "{message}");
        if let Ok(mut p) = self.problems.lock() {
            p.push(message);
        }
    }

    fn problems(&self) -> Option<String> {
        self.problems
            .lock()
            .ok()
            .filter(|p| !p.is_empty())
            .map(|p| p.join("; "))
    }

    async fn cached(&self) -> Vec<Value> {
        self.tasks
            .lock()
            .await
            .iter()
            .filter(|t| t.status == Status::Completed)
            .map(Task::cached)
            .collect()
    }

    async fn by_id(&self, id: &str) -> Option<Task> {
        self.tasks.lock().await.iter().find(|t| t.id == id).cloned()
    }

    async fn record(
        &self,
        task: &Task,
        status: StepStatus,
        output: Option<Value>,
    ) -> Result<(), TaskError> {
        let mut step = self
            .steps
            .new_step(&task.key, task.kind, status, task.started_at);
        step.finished_at = Some(self.clock.now_ms());
        step.wait_until = task.delay_until;
        step.output = output;
        step.error = task.error.clone();
        step.label = task.label.clone();
        self.steps
            .record(step)
            .await
            .map_err(|e| TaskError::Conflict(e.message().to_string()))
    }

    /// `POST /api/v1/runs/{runId}/tasks`: the stored task for the key (a completed one with its
    /// output; a failed one as a new attempt), or a new one. `send` is the event of a `Send
    /// Event` task, which Flare sends itself.
    pub async fn create(&self, new: NewTask, send: Option<SendEvent>) -> Result<Value, TaskError> {
        let key = new.idempotency_key.clone();
        if key.is_empty() || key.len() > crate::engine::steps::MAX_STEP_KEY_LEN {
            return Err(TaskError::BadRequest(
                "idempotencyKey must be 1 to 200 bytes".into(),
            ));
        }
        if key.starts_with(INTERNAL_PREFIX) || !crate::store::storable(&key) {
            return Err(TaskError::BadRequest(format!(
                "invalid idempotencyKey {key:?}"
            )));
        }
        let mut tasks = self.tasks.lock().await;
        let now = self.clock.now_ms();
        if let Some(task) = tasks.iter_mut().find(|t| t.key == key) {
            if task.status == Status::Errored {
                // A new execution runs a failed task again, as its next attempt.
                task.status = Status::Running;
                task.attempts += 1;
                task.error = None;
                task.started_at = now;
            }
            return Ok(task.server_task());
        }
        let name = new.name.clone().unwrap_or_else(|| "task".into());
        if new.operation.is_some() {
            return Err(TaskError::Unsupported(format!(
                "task {name:?}: operations run by the platform (io.backgroundFetch, fetch-poll) are not supported by Flare"
            )));
        }
        if new
            .callback
            .as_ref()
            .and_then(|c| c.get("enabled"))
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Err(TaskError::Unsupported(format!(
                "task {name:?}: tasks that wait for a callback (io.waitForRequest, callback tasks) are not supported by Flare"
            )));
        }
        let delay_until = new.delay_until.map(|t| t.timestamp_millis());
        let mut task = Task {
            id: task_id(&self.run_id, &key),
            key,
            name: name.clone(),
            kind: StepKind::Task,
            noop: new.noop,
            status: Status::Running,
            attempts: 1,
            output: None,
            error: None,
            delay_until,
            started_at: now,
            completed_at: None,
            parent_id: new.parent_id.clone(),
            params: new.params.clone(),
            description: new.description.clone(),
            icon: new.icon.clone(),
            label: Some(task_label(&name, new.display_key.as_deref())),
        };
        if let Some(until) = delay_until {
            task.kind = StepKind::Wait;
            if until > now {
                // Stored by the suspension when the SDK answers RESUME_WITH_TASK.
                task.status = Status::Waiting;
            } else {
                task.status = Status::Completed;
                task.completed_at = Some(now);
                self.record(&task, StepStatus::Succeeded, None).await?;
            }
        } else if new.noop {
            if name == "log" {
                let level = log_level(new.properties.as_ref());
                let message = new.description.clone().unwrap_or_default();
                let fields = new.params.clone().filter(|p| !p.is_null());
                self.io.logger.log(level, message, fields);
            }
            task.status = Status::Completed;
            task.completed_at = Some(now);
            self.record(&task, StepStatus::Succeeded, None).await?;
        } else if let Some(event) = send {
            task.kind = StepKind::Event;
            let event = if event.id.is_none() {
                event.id(format!("{}-{}", self.run_id, &task.id[5..]))
            } else {
                event
            };
            let sent = crate::send::send_with(
                &self.store,
                &self.clock,
                event,
                Source::Job(self.run_id.clone()),
                Some(self.run_id.clone()),
            )
            .await
            .map_err(|e| TaskError::BadRequest(format!("io.sendEvent: {e}")))?;
            let output = v2::event_log(&sent.event);
            task.status = Status::Completed;
            task.completed_at = Some(self.clock.now_ms());
            task.output = Some(output.clone());
            self.record(&task, StepStatus::Succeeded, Some(output))
                .await?;
        }
        let answer = task.server_task();
        tasks.push(task);
        Ok(answer)
    }

    /// `POST …/tasks/{id}/complete`: `output` is the task's result serialized as JSON text.
    pub async fn complete(&self, id: &str, output: Option<&str>) -> Result<Value, TaskError> {
        let mut tasks = self.tasks.lock().await;
        let Some(task) = tasks.iter_mut().find(|t| t.id == id) else {
            let message = format!(
                "the SDK completed the task {id:?}, which run {} does not have",
                self.run_id
            );
            self.problem(message.clone());
            return Err(TaskError::NotFound(message));
        };
        if task.status == Status::Completed {
            return Ok(task.server_task());
        }
        let text = output.unwrap_or("null");
        if text.len() > MAX_TASK_OUTPUT_BYTES {
            let message = format!(
                "the output of task {:?} is {} bytes, more than the {MAX_TASK_OUTPUT_BYTES} Flare keeps",
                task.name,
                text.len()
            );
            self.problem(message.clone());
            return Err(TaskError::TooLarge(message));
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| TaskError::BadRequest(format!("the task output is not JSON text: {e}")))?;
        let mut done = task.clone();
        done.status = Status::Completed;
        done.completed_at = Some(self.clock.now_ms());
        done.output = Some(value.clone());
        done.error = None;
        self.record(&done, StepStatus::Succeeded, Some(value))
            .await?;
        *task = done;
        Ok(task.server_task())
    }

    /// `POST …/tasks/{id}/fail`: the task's error is stored with its attempt count.
    pub async fn fail(&self, id: &str, error: &v2::ErrorWithStack) -> Result<Value, TaskError> {
        let mut tasks = self.tasks.lock().await;
        let Some(task) = tasks.iter_mut().find(|t| t.id == id) else {
            let message = format!(
                "the SDK failed the task {id:?}, which run {} does not have",
                self.run_id
            );
            self.problem(message.clone());
            return Err(TaskError::NotFound(message));
        };
        if task.status == Status::Completed {
            return Err(TaskError::Conflict(format!(
                "task {:?} is completed already",
                task.name
            )));
        }
        let mut failed = task.clone();
        failed.status = Status::Errored;
        failed.completed_at = Some(self.clock.now_ms());
        failed.error = Some(error.text());
        let attempts = json!({ "attempts": failed.attempts });
        self.record(&failed, StepStatus::Failed, Some(attempts))
            .await?;
        *task = failed;
        Ok(task.server_task())
    }
}

fn log_level(properties: Option<&Value>) -> Level {
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

/// The v2 executions in progress on this node, by run id.
#[derive(Debug, Default)]
pub struct Executions(Mutex<HashMap<String, Arc<Execution>>>);

impl Executions {
    /// The execution of `run_id` in progress here.
    pub fn get(&self, run_id: &str) -> Option<Arc<Execution>> {
        self.0.lock().ok().and_then(|m| m.get(run_id).cloned())
    }

    fn enter(self: &Arc<Self>, exec: Arc<Execution>) -> Entered {
        if let Ok(mut m) = self.0.lock() {
            m.insert(exec.run_id.clone(), Arc::clone(&exec));
        }
        Entered {
            runs: Arc::clone(self),
            exec,
        }
    }
}

/// Removes its execution from [`Executions`] when the execution ends (or is dropped).
struct Entered {
    runs: Arc<Executions>,
    exec: Arc<Execution>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Ok(mut m) = self.runs.0.lock() {
            if m.get(&self.exec.run_id)
                .is_some_and(|e| Arc::ptr_eq(e, &self.exec))
            {
                m.remove(&self.exec.run_id);
            }
        }
    }
}

/// A v2 endpoint as its jobs' bodies call it.
pub(crate) struct V2Target {
    pub id: String,
    pub url: String,
    pub key: String,
    pub caller: Caller,
    pub reports: Arc<Reports>,
    pub store: Store,
    pub clock: SharedClock,
    pub runs: Arc<Executions>,
}

/// One attempt of a v2 job: `EXECUTE_JOB` (again after each yield), its answer mapped onto the
/// attempt's outcome.
pub(crate) async fn execute(
    target: &V2Target,
    job: (&str, &str),
    timeout: Duration,
    payload: Value,
    io: Io,
) -> Result<Value, JobError> {
    let steps = io.steps();
    let stored: Vec<Step> = steps.stored().await?.values().cloned().collect();
    let now = target.clock.now_ms();
    let run_id = io.run_id().to_string();
    let mut tasks: Vec<Task> = stored
        .iter()
        .filter_map(|s| Task::from_step(&run_id, s))
        .collect();
    // Waits that are due now are over: record them, so the SDK gets them as completed.
    for step in &stored {
        if step.kind == StepKind::Wait && step.status != StepStatus::Succeeded {
            let until = step.wait_until.map_or(now, |t| t.timestamp_millis());
            if until <= now {
                steps.wait_until(&step.key, until).await;
                if let Some(t) = tasks.iter_mut().find(|t| t.key == step.key) {
                    t.status = Status::Completed;
                    t.completed_at = Some(now);
                }
            }
        }
    }
    let exec = Arc::new(Execution {
        run_id: run_id.clone(),
        io: io.clone(),
        steps: Arc::clone(&steps),
        store: target.store.clone(),
        clock: target.clock.clone(),
        tasks: tokio::sync::Mutex::new(tasks),
        problems: Mutex::default(),
    });
    let _entered = target.runs.enter(Arc::clone(&exec));
    let event = match target.store.event_get(io.event_id()).await {
        Ok(Some(e)) => {
            json!({"id": e.id, "name": e.name, "payload": payload, "context": e.context, "timestamp": e.timestamp})
        }
        _ => {
            json!({"id": io.event_id(), "name": io.event_name(), "payload": payload, "context": null, "timestamp": ms_to_time(now)})
        }
    };
    let bound = timeout
        .saturating_sub(Duration::from_millis(5))
        .max(Duration::from_millis(1));
    let failed = |e: String| {
        target.reports.error(
            &target.id,
            target.clock.now_ms(),
            format!(
                "run {run_id} (job {}, attempt {}): {e}",
                job.0,
                io.attempt()
            ),
        );
        JobError::from(e)
    };
    let mut yielded: Vec<String> = Vec::new();
    for call in 0..MAX_CALLS_PER_ATTEMPT {
        let body = v2::run_job_body(
            &RunJob {
                run_id: &run_id,
                job,
                event: event.clone(),
                started_at: ms_to_time(now).to_rfc3339(),
                is_retry: io.attempt() > 1,
                yielded: &yielded,
                limit_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
            },
            exec.cached().await,
        );
        let answer = v2::call(
            &target.caller,
            &target.url,
            &target.key,
            "EXECUTE_JOB",
            &[],
            &body,
            bound,
        )
        .await
        .map_err(|e| failed(e.to_string()))?;
        let response = match v2::parse_response(answer) {
            Ok(r) => r,
            Err(e) => {
                return Err(match exec.problems() {
                    Some(p) => JobError::fatal(p),
                    None => failed(format!("invalid answer: {e}")),
                })
            }
        };
        target.reports.ok(&target.id, target.clock.now_ms());
        if !matches!(response, RunJobResponse::Success { .. }) {
            if let Some(p) = exec.problems() {
                return Err(JobError::fatal(p));
            }
        }
        match response {
            RunJobResponse::Success { output } => return Ok(output.unwrap_or(Value::Null)),
            RunJobResponse::Error { error, task } => {
                if let Some(task) = task {
                    if let Err(e) = exec.fail(&task.id, &error).await {
                        tracing::debug!(run = %run_id, error = %e, "the errored task was not recorded");
                    }
                }
                return Err(JobError::from(error.text()));
            }
            RunJobResponse::ResumeWithTask { task }
            | RunJobResponse::ResumeWithParallelTask { task } => {
                let Some(task) = exec.by_id(&task.id).await else {
                    return Err(JobError::fatal(format!(
                        "the endpoint resumes with the task {:?}, which the run does not have",
                        task.id
                    )));
                };
                match (task.status, task.delay_until) {
                    (Status::Waiting, Some(until)) => {
                        // Suspends the execution until `until` (returns only when it is due).
                        steps.wait_until(&task.key, until).await;
                        mark_completed(&exec, &task.key).await;
                    }
                    (Status::Completed, _) => {}
                    _ => {
                        return Err(JobError::fatal(format!(
                            "the endpoint waits on task {:?} ({}), which is not a wait: Flare resumes runs only after io.wait (callbacks, io.backgroundFetch and io.waitForEvent are not supported)",
                            task.name,
                            task.status.as_str()
                        )))
                    }
                }
            }
            RunJobResponse::RetryWithTask {
                task,
                error,
                retry_at,
            } => {
                let Some(known) = exec.by_id(&task.id).await else {
                    return Err(JobError::fatal(format!(
                        "the endpoint retries the task {:?}, which the run does not have",
                        task.id
                    )));
                };
                if known.status != Status::Errored {
                    exec.fail(&task.id, &error)
                        .await
                        .map_err(|e| JobError::from(e.to_string()))?;
                }
                let key = format!("{INTERNAL_PREFIX}retry:{}:{}", known.key, known.attempts);
                steps.wait_until(&key, retry_at.timestamp_millis()).await;
            }
            RunJobResponse::YieldExecution { key } => {
                if yielded.contains(&key) {
                    return Err(JobError::fatal(format!(
                        "the endpoint yielded {key:?} twice in one execution"
                    )));
                }
                yielded.push(key);
            }
            RunJobResponse::AutoYieldExecution {} => {}
            RunJobResponse::AutoYieldExecutionWithCompletedTask { id, output } => {
                exec.complete(&id, output.as_deref())
                    .await
                    .map_err(|e| JobError::fatal(e.to_string()))?;
            }
            RunJobResponse::AutoYieldRateLimit { reset } => {
                let key = format!("{INTERNAL_PREFIX}rate-limit:{}:{call}", io.attempt());
                steps.wait_until(&key, reset).await;
            }
            RunJobResponse::Canceled {} => {
                return Err(JobError::fatal(
                    "the endpoint answered CANCELED (a task was cancelled); Flare cancels only queued runs, so the run is recorded failed",
                ))
            }
            RunJobResponse::InvalidPayload { errors } => {
                return Err(JobError::fatal(format!(
                    "invalid payload: the job's schema refused it: {}",
                    v2::short(&errors)
                )))
            }
            RunJobResponse::UnresolvedAuthError { issues } => {
                return Err(JobError::fatal(format!(
                    "unresolved integration auth (integrations are not supported by Flare): {}",
                    v2::short(&issues)
                )))
            }
        }
    }
    Err(JobError::fatal(format!(
        "the endpoint yielded {MAX_CALLS_PER_ATTEMPT} times in one attempt; Flare stops there"
    )))
}

async fn mark_completed(exec: &Execution, key: &str) {
    let now = exec.clock.now_ms();
    if let Some(t) = exec.tasks.lock().await.iter_mut().find(|t| t.key == key) {
        t.status = Status::Completed;
        t.completed_at = Some(now);
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
