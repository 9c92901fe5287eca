//! Version 2 of the endpoint protocol: durable steps over HTTP (written down for SDK authors in
//! `docs/endpoints.md`, "Protocol version 2").
//!
//! A run request carries the run's stored steps (key → output or error); the endpoint runs the
//! job from the top, returning stored results for the steps they name, and answers with what it
//! reached ([`super::step_answer`] reads it): completed `run` steps, then possibly one request
//! Flare carries out, or the final output or error. One attempt is a loop of such calls:
//!
//! - **`run` steps** are recorded at once ([`Steps::record`]: fenced by the lease; a step already
//!   stored as succeeded keeps its first result, so an endpoint that answers a step twice — a
//!   retry after a lost answer — stores it once), then Flare calls again (or finishes, when the
//!   answer also has the outcome).
//! - **`sleep`** is the engine's durable wait (`Steps::wait_until`): the execution suspends, the
//!   run goes back to the queue due at the wait's time holding no slot (the attempt is not
//!   counted), and the next execution sends the wait as completed.
//! - **`sendEvent`** sends its events as chained events of the run, each with the id
//!   `<run id>-<step key>-<event key>`, so sending again sends nothing twice; the step's output is
//!   `{"ids": [...]}`.
//! - **`waitForEvent`** is the engine's durable wait for an event (`Steps::wait_for_event`, what
//!   `io.wait_for_event` does): the execution suspends holding no slot until the first matching
//!   event sent after the wait was reached, or its timeout; the store records the step's result
//!   (the event `{id, name, payload, timestamp}`, or `null` on timeout) and the next call sends it.
//!   A wait still pending when the run executes again (its timeout passed) is not sent: the
//!   endpoint answers it again, and the engine ends it with `null` (or suspends again).
//! - **`invoke`** is `io.invoke` (`Steps::invoke_with`): a run of that one job, started once per
//!   key, waited for holding no slot. The next call sends the child's output as the step's
//!   `output`, or its failure (or the timeout) as the step's `error`, which the SDK throws as a
//!   step error (the job's retry policy sees it; the child's outcome stays the step's). An unknown
//!   job fails the run.
//! - **`callback`** is `io.callback`, in two answers, since the job needs the URL before it
//!   waits: `callback` creates the token (stored with its wait at once, so a post that comes
//!   early is kept) and Flare calls again with `{"callback": {token, path, deadline}}`; the job
//!   hands the URL on, then answers `waitForCallback` with the same key, which suspends until the
//!   post (its JSON body is the step's `output`) or the deadline (`null`).
//! - **Non-determinism**: a key answered as another kind of step than it is stored as means the
//!   job's code changed under the run; the run fails at once saying so. (A stored step that no
//!   longer comes back can only be seen by the SDK, which answers a fatal error: the document.)
//! - **Progress**: an answer without an outcome must reach a step that is not stored yet;
//!   otherwise calling again would get the same answer, and the run fails saying so.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::protocol::RunRequest;
use super::step_answer::{op_name, parse_answer, Op};
use super::target::Target;
use crate::clock::ms_to_time;
use crate::io::Io;
use crate::model::{Invoked, JobError, RunStatus, Step, StepKind, StepStatus};

/// Most calls in one attempt (each answer must make progress: a step or the outcome).
pub const MAX_CALLS_PER_ATTEMPT: usize = 1_000;

/// A callback made in this run: its token, when it was made and its deadline (ms).
type Handle = (String, i64, i64);

/// One attempt of a version-2 endpoint job: calls until the endpoint answers an outcome, a sleep
/// suspends the execution, or something fails.
pub(crate) async fn execute(
    target: &Target,
    job: (&str, &str),
    max_attempts: u32,
    timeout: Duration,
    payload: Value,
    io: Io,
) -> Result<Value, JobError> {
    let steps = io.steps();
    let clock = &target.clock;
    let stored: Vec<_> = steps.stored().await?.values().cloned().collect();
    // What the endpoint is told of each stored step, the kind it is stored as, and the callbacks
    // still waiting for their post.
    let mut done: Map<String, Value> = Map::new();
    let mut kinds: HashMap<String, StepKind> = HashMap::new();
    let mut callbacks: HashMap<String, Handle> = HashMap::new();
    for step in stored {
        kinds.insert(step.key.clone(), step.kind);
        match (step.kind, step.status) {
            (StepKind::Callback, _) => {
                let (told, handle) = callback_told(&step);
                if let Some(handle) = handle {
                    callbacks.insert(step.key.clone(), handle);
                }
                done.insert(step.key, told);
            }
            (StepKind::Invoke, StepStatus::Succeeded) => {
                done.insert(
                    step.key.clone(),
                    invoke_told(&step.key, step.invoked().as_deref()),
                );
            }
            // A child that failed in this attempt is told; one of an earlier attempt is not:
            // when the endpoint asks again, the job is invoked again (a new child).
            (StepKind::Invoke, StepStatus::Failed) if step.attempt == io.attempt() => {
                done.insert(
                    step.key.clone(),
                    invoke_told(&step.key, step.invoked().as_deref()),
                );
            }
            (StepKind::Invoke, StepStatus::Failed) => {}
            (_, StepStatus::Succeeded) => {
                done.insert(step.key, json!({ "output": step.output }));
            }
            (StepKind::Wait, _) => {
                // A wait due now is over (recorded so); one not due yet suspends again.
                let until = step
                    .wait_until
                    .map_or(clock.now_ms(), |t| t.timestamp_millis());
                steps.wait_until(&step.key, until).await;
                done.insert(step.key, json!({ "output": null }));
            }
            (_, StepStatus::Failed) => {
                done.insert(step.key, json!({ "error": step.error }));
            }
            _ => {}
        }
    }
    let (job_id, version) = job;
    let failed = |e: String| {
        target.reports.error(
            &target.id,
            clock.now_ms(),
            format!(
                "run {} (job {job_id}, attempt {}): {e}",
                io.run_id(),
                io.attempt()
            ),
        );
        JobError::from(e)
    };
    // Just inside the executor's own bound for the whole attempt.
    let deadline = Instant::now()
        + timeout
            .saturating_sub(Duration::from_millis(5))
            .max(Duration::from_millis(1));
    for _ in 0..MAX_CALLS_PER_ATTEMPT {
        let mut body = RunRequest {
            run_id: io.run_id(),
            attempt: io.attempt(),
            max_attempts,
            job_id,
            job_version: version,
            event_id: io.event_id(),
            event_name: io.event_name(),
            payload: payload.clone(),
        }
        .to_json();
        body["protocol"] = json!(super::protocol::PROTOCOL_STEPS);
        body["steps"] = Value::Object(done.clone());
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let answer = target
            .caller
            .call(&target.url, &target.secret, &body, left)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let answer = parse_answer(answer).map_err(|e| failed(format!("invalid answer: {e}")))?;
        target.reports.ok(&target.id, clock.now_ms());
        for (level, message, fields) in answer.logs {
            io.logger.log(level, message, fields);
        }
        if !answer.events.is_empty() {
            io.send_keyed(answer.events)
                .await
                .map_err(|e| JobError::from(format!("could not send the answer's events: {e}")))?;
        }
        let mut progress = false;
        for (key, op) in answer.steps {
            if let Some(&stored) = kinds.get(&key) {
                if stored != op.kind() {
                    return Err(JobError::fatal(format!(
                        "step {key:?} is stored as a {} step and answered now as a {} step: the job's code changed while the run was in progress (step keys must stay the same and unique within a run)",
                        op_name(stored),
                        op_name(op.kind())
                    )));
                }
            } else if matches!(op, Op::WaitForCallback) {
                return Err(JobError::fatal(format!(
                    "step {key:?}: waitForCallback for a key that is no callback step: the job must make the callback (a callback step of the same key) first"
                )));
            }
            let told = done.get(&key);
            let over = match op {
                // A callback is made once; its wait is over once it has an output.
                Op::Callback { .. } => told.is_some(),
                // An invoked run's outcome, an output or an error, is final.
                Op::Invoke { .. } => told.is_some(),
                _ => told.is_some_and(|d| d.get("output").is_some()),
            };
            if over {
                // Answered twice: the stored result stays.
                continue;
            }
            progress = true;
            kinds.insert(key.clone(), op.kind());
            let now = clock.now_ms();
            match op {
                Op::Run(result) => {
                    let status = match result {
                        Ok(_) => StepStatus::Succeeded,
                        Err(_) => StepStatus::Failed,
                    };
                    let mut step = steps.new_step(&key, StepKind::Task, status, now);
                    step.finished_at = Some(now);
                    let told = match result {
                        Ok(output) => {
                            step.output = Some(output.clone());
                            json!({ "output": output })
                        }
                        Err(error) => {
                            step.error = Some(error.clone());
                            json!({ "error": error })
                        }
                    };
                    steps.record(step).await?;
                    done.insert(key, told);
                }
                Op::Sleep { until, duration_ms } => {
                    let until = until.unwrap_or_else(|| now.saturating_add(ms(duration_ms)));
                    // Suspends the execution unless `until` has passed.
                    steps.wait_until(&key, until).await;
                    done.insert(key, json!({ "output": null }));
                }
                Op::SendEvent(events) => {
                    let keyed = events
                        .into_iter()
                        .map(|(k, e)| (format!("{key}-{k}"), e))
                        .collect();
                    let sent = io.send_keyed(keyed).await.map_err(|e| {
                        JobError::from(format!("step {key:?}: could not send its events: {e}"))
                    })?;
                    let output =
                        json!({ "ids": sent.iter().map(|e| e.id.clone()).collect::<Vec<_>>() });
                    let mut step =
                        steps.new_step(&key, StepKind::Event, StepStatus::Succeeded, now);
                    step.finished_at = Some(clock.now_ms());
                    step.output = Some(output.clone());
                    steps.record(step).await?;
                    done.insert(key, json!({ "output": output }));
                }
                Op::WaitForEvent {
                    event,
                    match_path,
                    condition,
                    timeout_ms,
                } => {
                    // Suspends the execution unless the wait is over (timed out just now).
                    let waited = steps
                        .wait_for_event(
                            &key,
                            &event,
                            match_path.as_deref(),
                            condition.as_deref(),
                            ms(Some(timeout_ms)),
                        )
                        .await
                        .map_err(|e| step_fatal(&key, e))?;
                    let output = serde_json::to_value(waited).unwrap_or(Value::Null);
                    done.insert(key, json!({ "output": output }));
                }
                Op::Invoke {
                    job,
                    payload,
                    timeout_ms,
                } => {
                    // Starts the child once per key, then suspends until it ended (or timed out).
                    let payload = serde_json::value::to_raw_value(&payload).map_err(|e| {
                        JobError::fatal(format!("step {key:?}: the payload is not JSON: {e}"))
                    })?;
                    let mut told = steps
                        .invoke_with(
                            std::slice::from_ref(&key),
                            &job,
                            |_| Ok(payload.clone()),
                            ms(Some(timeout_ms)),
                            |key, ended| Ok(invoke_told(key, ended)),
                        )
                        .await
                        .map_err(|e| step_fatal(&key, e))?;
                    done.insert(key, told.pop().unwrap_or_default());
                }
                Op::Callback { timeout_ms } => {
                    let (token, since, until) = steps
                        .callback(&key, ms(Some(timeout_ms)))
                        .await
                        .map_err(|e| step_fatal(&key, e))?;
                    done.insert(key.clone(), json!({ "callback": made(&token, until) }));
                    callbacks.insert(key, (token, since, until));
                }
                Op::WaitForCallback => {
                    let Some((token, since, until)) = callbacks.get(&key).cloned() else {
                        return Err(JobError::fatal(format!(
                            "step {key:?}: the callback's token is not known; the run cannot wait for it"
                        )));
                    };
                    // Suspends the execution unless the deadline passed.
                    let body = steps.callback_wait(&key, &token, since, until).await?;
                    done.insert(
                        key,
                        json!({ "callback": made(&token, until), "output": body }),
                    );
                }
            }
        }
        match answer.outcome {
            Some(Ok(output)) => return Ok(output),
            Some(Err((message, true))) => return Err(JobError::from(message)),
            Some(Err((message, false))) => return Err(JobError::fatal(message)),
            None if !progress => {
                // Calling again would get the same answer.
                return Err(JobError::fatal(
                    "the endpoint answered only steps the request gave it as completed, and no outcome: it does not return stored results (see \"Running the job\" in docs/endpoints.md)",
                ));
            }
            None => {}
        }
    }
    Err(JobError::fatal(format!(
        "the endpoint answered {MAX_CALLS_PER_ATTEMPT} times in one attempt without an outcome; Flare stops there"
    )))
}

/// A duration in ms as the engine takes it.
fn ms(duration_ms: Option<u64>) -> i64 {
    i64::try_from(duration_ms.unwrap_or(0)).unwrap_or(i64::MAX / 2)
}

/// A step's error that no retry fixes (a bad match, an unknown job) names the step; others (the
/// store, a lost lease) fail the attempt as they are.
fn step_fatal(key: &str, e: JobError) -> JobError {
    if e.is_retryable() {
        e
    } else {
        JobError::fatal(format!("step {key:?}: {}", e.message()))
    }
}

/// What the endpoint is told of a callback: its token, the path Flare takes its post at, and
/// its deadline.
fn made(token: &str, until: i64) -> Value {
    json!({
        "token": token,
        "path": format!("/callbacks/{token}"),
        "deadline": deadline(until),
    })
}

fn deadline(until: i64) -> String {
    ms_to_time(until).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What the endpoint is told of a stored callback step, and its handle while it still waits. A
/// posted callback's output is `{"body", "token"}`; one past its deadline is `null` (the token
/// is no longer known then: only the deadline is told).
fn callback_told(step: &Step) -> (Value, Option<Handle>) {
    let since = step.started_at.timestamp_millis();
    let until = step.wait_until.map_or(since, |t| t.timestamp_millis());
    let output = step.output.clone().unwrap_or(Value::Null);
    let token = output["token"].as_str().unwrap_or_default().to_string();
    let callback = if token.is_empty() {
        json!({ "deadline": deadline(until) })
    } else {
        made(&token, until)
    };
    if step.status == StepStatus::Succeeded {
        let body = output.get("body").cloned().unwrap_or(Value::Null);
        return (json!({ "callback": callback, "output": body }), None);
    }
    (json!({ "callback": callback }), Some((token, since, until)))
}

/// What the endpoint is told of an invoked run that ended: its output, or why it did not succeed
/// (`ended` is `None` when it did not end in time).
fn invoke_told(key: &str, ended: Option<&Invoked>) -> Value {
    let Some(ended) = ended else {
        return json!({
            "error": format!("invoke {key:?}: the invoked run did not end before the timeout")
        });
    };
    if ended.status == RunStatus::Succeeded {
        return json!({ "output": ended.output });
    }
    json!({
        "error": format!(
            "invoke {key:?}: run {} {}: {}",
            ended.run_id,
            ended.status.as_str(),
            ended.error.as_deref().unwrap_or("no error given")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invoked_run_is_told_as_its_output_or_an_error() {
        let ok =
            json!({"runId": "run_1", "status": "succeeded", "output": {"n": 2}, "error": null});
        let ok = Invoked::from_json(&ok);
        assert_eq!(invoke_told("k", ok.as_ref()), json!({"output": {"n": 2}}));
        let failed = json!({"runId": "run_1", "status": "failed", "output": null, "error": "boom"});
        let failed = Invoked::from_json(&failed);
        assert_eq!(
            invoke_told("k", failed.as_ref()),
            json!({"error": "invoke \"k\": run run_1 failed: boom"})
        );
        // A timeout is stored as `null`.
        assert_eq!(Invoked::from_json(&Value::Null), None);
        let told = invoke_told("k", None);
        assert!(told["error"]
            .as_str()
            .is_some_and(|e| e.contains("timeout")));
    }
}
