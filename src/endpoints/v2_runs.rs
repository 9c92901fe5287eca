//! Runs of Trigger.dev v2 jobs: the job body that executes a run at its endpoint
//! (`EXECUTE_JOB`, then each `RunJobResponse` status mapped onto Flare's outcomes and durable
//! steps). While it calls the endpoint the execution is registered in the node's [`Executions`],
//! where the SDK's task calls find it ([`super::v2_execution`]).
//!
//! - **A resumed execution** gets the run's completed tasks as `tasks`, so the SDK does not
//!   repeat them; a wait that is due is ended first (an `io.wait` completed; a callback task
//!   that nothing resumed by its deadline errored, see [`super::v2_callbacks`]).
//! - **`RESUME_WITH_TASK`** suspends the execution on the task's durable wait (the run holds no
//!   worker, the attempt is not counted, it survives restarts): an `io.wait`'s time, or what a
//!   callback task waits for (a `POST` to its URL, an event, an invoked run).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::caller::Caller;
use super::reports::Reports;
use super::trigger_dev_v2::{self as v2, RunJob, RunJobResponse};
use super::v2_callbacks::{self as callbacks, run_notification};
use super::v2_execution::{Execution, Executions};
use super::v2_tasks::{Status, Task, INTERNAL_PREFIX};
use crate::clock::SharedClock;
use crate::io::Io;
use crate::model::JobError;
use crate::model::{ms_to_time, Step, StepKind, StepStatus};
use crate::store::Store;

/// Most `EXECUTE_JOB` calls in one attempt (yields and auto-yields).
pub const MAX_CALLS_PER_ATTEMPT: usize = 100;

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
    // As stored: the tasks read an invoke task's outcome from its output.
    let mut stored: Vec<Step> = steps
        .stored()
        .await?
        .values()
        .cloned()
        .map(Step::with_output)
        .collect();
    let now = target.clock.now_ms();
    let run_id = io.run_id().to_string();
    // Waits that are due now are over: record them, so the SDK gets them as completed (an
    // io.wait) or errored (a callback task that nothing resumed in time).
    for step in &mut stored {
        let until = step.wait_until.map_or(now, |t| t.timestamp_millis());
        if step.status == StepStatus::Succeeded || until > now {
            continue;
        }
        if step.kind == StepKind::Wait {
            steps.wait_until(&step.key, until).await;
            step.status = StepStatus::Succeeded;
        } else if callbacks::is_callback_kind(step.kind) {
            step.output = Some(steps.expire(&step.key).await?);
            step.status = StepStatus::Succeeded;
        }
    }
    let mut tasks: Vec<Task> = stored
        .iter()
        .filter_map(|s| Task::from_step(&run_id, s))
        .collect();
    for task in &mut tasks {
        if let Some(ended) = task.ended_run().cloned() {
            let child = ended["runId"].as_str().unwrap_or_default();
            let run = match target.store.run_detail(child).await {
                Ok(detail) => detail.map(|d| d.run),
                Err(e) => return Err(JobError::from(format!("could not read run {child}: {e}"))),
            };
            task.output = Some(run_notification(&ended, run.as_ref()));
        }
    }
    let exec = Arc::new(Execution {
        run_id: run_id.clone(),
        io: io.clone(),
        steps: Arc::clone(&steps),
        store: target.store.clone(),
        clock: target.clock.clone(),
        tasks: tokio::sync::Mutex::new(tasks),
        problems: std::sync::Mutex::default(),
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
                let Some(mut task) = exec.by_id(&task.id).await else {
                    return Err(JobError::fatal(format!(
                        "the endpoint resumes with the task {:?}, which the run does not have",
                        task.id
                    )));
                };
                if task.status == Status::Running {
                    // A parallel task (`io.parallel`, `batchInvokeAndWaitForCompletion`) waits
                    // for its subtasks, one after the other: its first waiting one now.
                    if let Some(child) = exec.waiting_child(&task.id).await {
                        task = child;
                    }
                }
                if let (Status::Waiting, Some(callback)) = (task.status, &task.callback) {
                    // Suspends the execution until the callback task is resumed or its deadline.
                    steps
                        .suspend_on(&task.key, callback.since, callback.until, callback.wait())
                        .await;
                }
                match (task.status, task.delay_until) {
                    (Status::Waiting, Some(until)) => {
                        // Suspends the execution until `until` (returns only when it is due).
                        steps.wait_until(&task.key, until).await;
                        exec.mark_completed(&task.key).await;
                    }
                    (Status::Completed, _) => {}
                    _ => {
                        return Err(JobError::fatal(format!(
                            "the endpoint waits on task {:?} ({}), which is neither a wait nor a callback task nor a parallel task waiting for one (io.backgroundFetch is not supported by Flare)",
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
