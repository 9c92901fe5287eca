//! One execution of a Trigger.dev v2 run in progress, as the SDK's calls reach it: the tasks it
//! creates, completes and fails (`POST /api/v1/runs/{runId}/tasks…`), the event wait and the
//! invoke a callback task names (`io.waitForEvent`'s dispatcher, `invokeAndWaitForCompletion`),
//! and the executions in progress on this node ([`Executions`]), which those calls look up.
//!
//! - **Tasks are durable steps** of the run (see [`super::v2_tasks`]), written at once, fenced
//!   by the execution's lease, as `io.run_task` is.
//! - **Only the run's current execution writes its tasks**: the execution registers itself here
//!   while it calls the endpoint; a task call for a run that is not executing on this node is a
//!   409.
//! - **`io.wait`** is a task with `delayUntil`: it is answered `WAITING` and stored by the
//!   suspension when the SDK answers `RESUME_WITH_TASK`.
//! - **Callback tasks** (`callback.enabled`) are stored with their callback at once
//!   ([`super::v2_callbacks`]).
//! - **`io.logger.*`** are `noop` tasks named `log`: their description and params become the
//!   run's log lines, at their level.
//! - **`io.sendEvent`** is a task named `Send Event`: Flare sends the event itself, as a chained
//!   event whose parent is the run (idempotent per task), and answers the task completed with
//!   the event, so the SDK does not send it again through `POST /api/v1/events` (which could not
//!   know the run).
//! - **Bad answers** (an unknown task id, an output over
//!   [`super::v2_tasks::MAX_TASK_OUTPUT_BYTES`], a dispatcher or invoke Flare cannot honour)
//!   are refused to the SDK with a clear error and remembered: the attempt then fails with that
//!   error instead of whatever the SDK made of the refusal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::trigger_dev_v2 as v2;
use super::v2_callbacks::{self as callbacks, Callback, Dispatcher, Resumes};
use super::v2_tasks::{
    log_level, task_id, task_label, NewTask, Status, Task, TaskError, INTERNAL_PREFIX,
    MAX_TASK_OUTPUT_BYTES,
};
use crate::client::SendEvent;
use crate::clock::SharedClock;
use crate::engine::steps::Steps;
use crate::io::Io;
use crate::model::{Source, StepKind, StepStatus};
use crate::store::Store;

/// One execution of a v2 run in progress: the run's tasks and what went wrong with the SDK's
/// calls.
pub struct Execution {
    pub(super) run_id: String,
    pub(super) io: Io,
    pub(super) steps: Arc<Steps>,
    pub(super) store: Store,
    pub(super) clock: SharedClock,
    pub(super) tasks: tokio::sync::Mutex<Vec<Task>>,
    pub(super) problems: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Execution {
    /// The run executing.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    fn problem(&self, message: String) {
        tracing::warn!(run = %self.run_id, "{message}");
        if let Ok(mut p) = self.problems.lock() {
            p.push(message);
        }
    }

    /// What went wrong with the SDK's calls, if anything.
    pub(super) fn problems(&self) -> Option<String> {
        self.problems
            .lock()
            .ok()
            .filter(|p| !p.is_empty())
            .map(|p| p.join("; "))
    }

    /// The completed tasks, as `RunJobBody.tasks` sends them.
    pub(super) async fn cached(&self) -> Vec<Value> {
        self.tasks
            .lock()
            .await
            .iter()
            .filter(|t| t.status == Status::Completed)
            .map(Task::cached)
            .collect()
    }

    /// The task `id`.
    pub(super) async fn by_id(&self, id: &str) -> Option<Task> {
        self.tasks.lock().await.iter().find(|t| t.id == id).cloned()
    }

    /// Whether a task of this execution has the idempotency key `key`.
    async fn has_key(&self, key: &str) -> bool {
        self.tasks.lock().await.iter().any(|t| t.key == key)
    }

    /// Whether a waiting callback task of this execution has the token `token`.
    async fn has_token(&self, token: &str) -> bool {
        self.tasks.lock().await.iter().any(|t| {
            t.status == Status::Waiting && t.callback.as_ref().is_some_and(|c| c.token == token)
        })
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
    /// Event` task, which Flare sends itself. `base` is Flare's address as the SDK calls it, for
    /// a callback task's URL.
    pub async fn create(
        &self,
        new: NewTask,
        send: Option<SendEvent>,
        base: &str,
    ) -> Result<Value, TaskError> {
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
        let callback_ms =
            callbacks::timeout_ms(new.callback.as_ref()).map_err(TaskError::BadRequest)?;
        let mut tasks = self.tasks.lock().await;
        let now = self.clock.now_ms();
        if let Some(task) = tasks.iter_mut().find(|t| t.key == key) {
            // A task read back from its step learns its parent again.
            if task.parent_id.is_none() {
                task.parent_id.clone_from(&new.parent_id);
            }
            if task.runs_again() {
                // A new execution runs a failed task again, as its next attempt.
                task.status = Status::Running;
                task.attempts += 1;
                task.error = None;
                task.started_at = now;
            }
            return Ok(task.server_task(Some(base)));
        }
        let name = new.name.clone().unwrap_or_else(|| "task".into());
        if new.operation.is_some() {
            return Err(TaskError::Unsupported(format!(
                "task {name:?}: operations run by the platform (io.backgroundFetch, fetch-poll) are not supported by Flare"
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
            callback: None,
        };
        if let Some(timeout_ms) = callback_ms {
            self.create_callback(&mut task, timeout_ms).await?;
        } else if let Some(until) = delay_until {
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
        let answer = task.server_task(Some(base));
        tasks.push(task);
        Ok(answer)
    }

    /// Makes `task` a callback task: its token and deadline stored with its wait (a `POST` to its
    /// URL resumes it until the SDK names an event or a run instead), labelled for the run page.
    async fn create_callback(&self, task: &mut Task, timeout_ms: i64) -> Result<(), TaskError> {
        let conflict = |e: crate::model::JobError| TaskError::Conflict(e.message().to_string());
        let (token, since, until) = self
            .steps
            .callback(&task.key, timeout_ms)
            .await
            .map_err(conflict)?;
        let mut step =
            self.steps
                .new_step(&task.key, StepKind::Callback, StepStatus::Waiting, since);
        step.wait_until = Some(until);
        step.output = Some(json!({ "token": token }));
        step.label = task.label.clone();
        self.steps.record(step).await.map_err(conflict)?;
        task.kind = StepKind::Callback;
        task.status = Status::Waiting;
        task.started_at = since;
        task.callback = Some(Callback {
            token,
            since,
            until,
            resumes: Resumes::Request,
        });
        Ok(())
    }

    /// `POST /api/v1/event-dispatchers/ephemeral` for the waiting task with `token`
    /// (`io.waitForEvent`): the task waits for the event it names. Answers the dispatcher's id.
    pub async fn dispatch(&self, token: &str, dispatcher: &Dispatcher) -> Result<Value, TaskError> {
        let wait = dispatcher.wait().map_err(|e| {
            let message = format!("io.waitForEvent: {e}");
            self.problem(message.clone());
            TaskError::BadRequest(message)
        })?;
        let mut tasks = self.tasks.lock().await;
        let task = waiting(&mut tasks, token)?;
        if let Some(c) = task.callback.as_mut() {
            c.resumes = Resumes::Event(wait);
        }
        Ok(json!({ "id": task.id }))
    }

    /// `POST /api/v1/jobs/{jobId}/invoke` with the URL of the waiting task with `token` as
    /// `callbackUrl` (`invokeAndWaitForCompletion`): a run of `job_id`, a child of this run
    /// (once per task), which the task waits for. Answers the child's id.
    pub async fn invoke(
        &self,
        token: &str,
        job_id: &str,
        payload: Value,
    ) -> Result<String, TaskError> {
        let mut tasks = self.tasks.lock().await;
        let task = waiting(&mut tasks, token)?;
        let now = self.clock.now_ms();
        let child = match self.steps.spawn(&task.key, job_id, payload, now).await {
            Ok(child) => child,
            Err(e) if !e.is_retryable() => {
                let message =
                    format!("invokeAndWaitForCompletion: no job {job_id:?} is defined in Flare");
                self.problem(message.clone());
                return Err(TaskError::NotFound(message));
            }
            Err(e) => return Err(TaskError::Conflict(e.message().to_string())),
        };
        if let Some(c) = task.callback.as_mut() {
            c.resumes = Resumes::Run(child.clone());
        }
        Ok(child)
    }

    /// The first waiting subtask of the task `parent_id` (a parallel task's).
    pub(super) async fn waiting_child(&self, parent_id: &str) -> Option<Task> {
        self.tasks
            .lock()
            .await
            .iter()
            .find(|t| t.status == Status::Waiting && t.parent_id.as_deref() == Some(parent_id))
            .cloned()
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
            return Ok(task.server_task(None));
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
        Ok(task.server_task(None))
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
        failed.callback = None;
        let attempts = json!({ "attempts": failed.attempts });
        self.record(&failed, StepStatus::Failed, Some(attempts))
            .await?;
        *task = failed;
        Ok(task.server_task(None))
    }

    /// Marks the task `key` completed (a wait that is over).
    pub(super) async fn mark_completed(&self, key: &str) {
        let now = self.clock.now_ms();
        if let Some(t) = self.tasks.lock().await.iter_mut().find(|t| t.key == key) {
            t.status = Status::Completed;
            t.completed_at = Some(now);
        }
    }
}

/// The waiting callback task with `token`, or why not.
fn waiting<'a>(tasks: &'a mut [Task], token: &str) -> Result<&'a mut Task, TaskError> {
    tasks
        .iter_mut()
        .find(|t| {
            t.status == Status::Waiting && t.callback.as_ref().is_some_and(|c| c.token == token)
        })
        .ok_or_else(|| {
            TaskError::NotFound("the callback URL is not a waiting task of this run".into())
        })
}

/// The v2 executions in progress on this node, by run id.
#[derive(Debug, Default)]
pub struct Executions(Mutex<HashMap<String, Arc<Execution>>>);

impl Executions {
    /// The execution of `run_id` in progress here.
    pub fn get(&self, run_id: &str) -> Option<Arc<Execution>> {
        self.0.lock().ok().and_then(|m| m.get(run_id).cloned())
    }

    fn all(&self) -> Vec<Arc<Execution>> {
        self.0
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The execution in progress here with a waiting callback task whose URL is `url`.
    pub async fn by_callback_url(&self, url: &str) -> Option<Arc<Execution>> {
        let token = callbacks::token_of(url)?;
        for exec in self.all() {
            if exec.has_token(token).await {
                return Some(exec);
            }
        }
        None
    }

    /// The execution in progress here with a task whose idempotency key is `key` (the SDK sends
    /// it as the `Idempotency-Key` of an invoke made from a task, `job.invoke(cacheKey, …)`).
    pub async fn by_task_key(&self, key: &str) -> Option<Arc<Execution>> {
        for exec in self.all() {
            if exec.has_key(key).await {
                return Some(exec);
            }
        }
        None
    }

    pub(super) fn enter(self: &Arc<Self>, exec: Arc<Execution>) -> Entered {
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
pub(super) struct Entered {
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
