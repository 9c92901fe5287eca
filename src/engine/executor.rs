//! Runs one attempt of one claimed run, as a pipeline of small steps:
//! find the job → run it (catching panics, bounded by the timeout) → normalise the outcome
//! (succeeded / retry at now + backoff / failed) → hand it to the completer with the log lines.
//!
//! Outcome contract: `Ok(output)` succeeds; an error is retried while attempts remain, unless it is
//! fatal ([`crate::JobError::fatal`], or a payload that does not deserialize into the job's type);
//! a panic or a timeout counts as an error. A job that reached an `io.wait` not yet due is
//! suspended: its future is dropped and the run goes back to the queue, due when the wait is,
//! without counting the attempt (see [`super::steps`]). A run cancelled while it executes (its
//! lease gone, noticed by the heartbeat or by [`super::Engine::run_cancel`]) is stopped the same
//! way: its future is dropped, and its completion is refused by the store (fencing).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::completer::finish;
use super::execution::Execution;
use super::shared::{set_abort, track, Registered, Shared};
use super::steps::Suspension;
use crate::metrics::AttemptEnd;
use crate::model::JobError;
use crate::store::{ClaimedRun, Completion, Finish};

/// How an attempt ended, before the retry policy is applied.
#[derive(Debug)]
pub enum Outcome {
    /// The job returned its output.
    Succeeded(serde_json::Value),
    /// The job failed; `retryable` says whether another attempt may help.
    Failed {
        /// What went wrong.
        message: String,
        /// False for invalid payloads and fatal errors.
        retryable: bool,
    },
    /// The job reached `io.wait` (step `key`, called at `since`) before `until`: it resumes then
    /// (`io.wait_for_event`: or when a matching event arrives).
    Waiting {
        /// The wait step's key.
        key: String,
        /// When the run is due again, ms.
        until: i64,
        /// When the job called the wait, ms.
        since: i64,
        /// The event waited for (`io.wait_for_event`).
        event: Option<crate::model::EventWait>,
    },
}

/// Starts executing `run` on its own task.
pub(crate) fn spawn(shared: &Arc<Shared>, run: ClaimedRun) {
    let cancel = tokio_util::sync::CancellationToken::new();
    track(
        shared,
        &run.id,
        run.token,
        &run.job_id,
        None,
        cancel.clone(),
    );
    let run_id = run.id.clone();
    let task = tokio::spawn(execute(Arc::clone(shared), run, cancel));
    set_abort(shared, &run_id, task.abort_handle());
}

async fn execute(shared: Arc<Shared>, mut run: ClaimedRun, cancel: CancellationToken) {
    let job = shared
        .jobs
        .read()
        .ok()
        .and_then(|j| j.get(&run.job_id).cloned());
    // The handler gets its own copy; the steps share this one (a wait's match reads it).
    let payload = Arc::new(std::mem::take(&mut run.payload));
    let exec = Execution::new(
        &run,
        Arc::clone(&payload),
        shared.store.clone(),
        shared.clock.clone(),
        cancel,
    );
    let logger = exec.logger.clone();
    let steps = Arc::clone(&exec.steps);
    let outcome = match job {
        Some(job) => perform(&job, serde_json::Value::clone(&payload), exec).await,
        None => Outcome::Failed {
            message: format!("job {:?} is not defined in this process", run.job_id),
            retryable: true,
        },
    };
    let finished_at = shared.clock.now_ms();
    let finish_as = match outcome {
        Outcome::Succeeded(output) => Finish::Succeeded(output),
        Outcome::Failed { message, retryable } if retryable && run.attempt < run.max_attempts => {
            let policy = shared
                .jobs
                .read()
                .ok()
                .and_then(|j| j.get(&run.job_id).map(|r| r.spec.retry))
                .unwrap_or_default();
            let unit = shared.jitter.read().map(|j| j()).unwrap_or(0.5);
            let wait = policy.backoff(run.attempt, unit);
            let at = finished_at + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
            tracing::info!(run = %run.id, job = %run.job_id, attempt = run.attempt, error = %message, "run failed; retrying");
            Finish::Retry { error: message, at }
        }
        Outcome::Failed { message, .. } => {
            tracing::warn!(run = %run.id, job = %run.job_id, attempt = run.attempt, error = %message, "run failed");
            Finish::Failed(message)
        }
        Outcome::Waiting {
            key,
            until,
            since,
            event,
        } => {
            tracing::debug!(run = %run.id, job = %run.job_id, step = %key, until, "run waits");
            Finish::Wait {
                key,
                until,
                since,
                event,
            }
        }
    };
    let end = match &finish_as {
        Finish::Succeeded(_) => AttemptEnd::Succeeded,
        Finish::Failed(_) => AttemptEnd::Failed,
        Finish::Retry { .. } => AttemptEnd::Retried,
        Finish::Wait { .. } => AttemptEnd::Waiting,
    };
    crate::metrics::attempt_finished(&run.job_id, end, finished_at - run.started_at);
    let completion = Completion {
        run_id: run.id.clone(),
        job_id: run.job_id.clone(),
        token: run.token,
        attempt: run.attempt,
        started_at: run.started_at,
        finished_at,
        finish: finish_as,
        logs: once(&shared, &run.id, run.attempt, &steps, logger.take()).await,
    };
    finish(&shared, completion).await;
    // The completer, woken by this completion, is queued to run next on this worker, where no
    // other worker takes it. Dropping thousands of steps (a fan-in's parent's) takes
    // milliseconds: such an execution yields first, so the completion is recorded before the
    // drop. Others do not: a yield after every run splits the completer's batches (the plain
    // drain on SQLite lost about a tenth of its rate).
    if steps.held() >= YIELD_BEFORE_DROPPING {
        tokio::task::yield_now().await;
    }
    drop(steps);
}

/// The stored steps from which a finished execution lets the completer run before it drops them.
const YIELD_BEFORE_DROPPING: usize = 1_000;

/// The lines of this execution without those its attempt already recorded: an execution that
/// resumes after a wait runs the job's body again from the start, so the lines written before
/// the wait come again, identical and in order (steps replay from storage). The longest prefix
/// of `lines` equal (level, message, fields) to the attempt's stored lines is dropped: a line is
/// recorded once. Lines after the point the earlier execution reached are kept, repeated or not;
/// a replayed line that differs (it prints the time, say) is kept too. If the stored lines
/// cannot be read, every line is kept.
async fn once(
    shared: &Shared,
    run_id: &str,
    attempt: u32,
    steps: &crate::engine::steps::Steps,
    lines: Vec<crate::model::LogLine>,
) -> Vec<crate::model::LogLine> {
    if lines.is_empty() || !steps.resumed_after_wait() {
        return lines;
    }
    // Boxed: the read's future is large, and held inline it would grow every execution's task.
    let stored = match Box::pin(shared.store.run_detail(run_id)).await {
        Ok(Some(detail)) => detail.logs,
        Ok(None) => return lines,
        Err(e) => {
            tracing::debug!(run = %run_id, error = %e, "could not read the run's log lines; keeping every line");
            return lines;
        }
    };
    let before = stored.iter().filter(|l| l.attempt == attempt);
    let replayed = before
        .zip(&lines)
        .take_while(|(a, b)| a.level == b.level && a.message == b.message && a.fields == b.fields)
        .count();
    lines.into_iter().skip(replayed).collect()
}

/// Runs the job body once, catching panics and enforcing the timeout, until it returns or
/// suspends itself (an `io.wait` not yet due; its future is then dropped).
pub(crate) async fn perform(
    job: &Registered,
    payload: serde_json::Value,
    exec: Execution,
) -> Outcome {
    let steps = Arc::clone(&exec.steps);
    let cancel = exec.cancel.clone();
    let handler = Arc::clone(&job.handler);
    let body = AssertUnwindSafe(async move { handler(payload, exec).await }).catch_unwind();
    // The body is polled before the cancellation: a job that notices it and returns ends with
    // its own outcome (refused by the store like any completion of a run whose lease is gone).
    let ended = tokio::select! {
        biased;
        () = steps.suspended() => None,
        ended = tokio::time::timeout(job.spec.timeout, body) => Some(ended),
        () = cancel.cancelled() => {
            return Outcome::Failed {
                message: "cancelled while running".into(),
                retryable: false,
            }
        }
    };
    let Some(ended) = ended else {
        return match steps.suspension() {
            Some(Suspension::Wait {
                key,
                until,
                since,
                event,
            }) => Outcome::Waiting {
                key,
                until,
                since,
                event,
            },
            Some(Suspension::Fail { message, retryable }) => Outcome::Failed { message, retryable },
            None => Outcome::Failed {
                message: "the execution was suspended without a reason".into(),
                retryable: true,
            },
        };
    };
    match ended {
        Err(_) => Outcome::Failed {
            message: format!("timed out after {:?}", job.spec.timeout),
            retryable: true,
        },
        Ok(Err(panic)) => Outcome::Failed {
            message: format!("panicked: {}", panic_message(panic.as_ref())),
            retryable: true,
        },
        Ok(Ok(Ok(output))) => Outcome::Succeeded(output),
        Ok(Ok(Err(e))) => outcome_of(e),
    }
}

fn outcome_of(e: JobError) -> Outcome {
    Outcome::Failed {
        retryable: e.is_retryable(),
        message: e.message().to_string(),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
