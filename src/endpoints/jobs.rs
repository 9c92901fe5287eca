//! An endpoint's jobs in this node's engine: each defined with a body that calls the endpoint
//! ([`define`]; a Trigger.dev v2 endpoint's with [`define_v2`]), and one attempt of such a job
//! ([`execute`]: the `run` call, then its answer's logs, events and outcome; a version-2 job's
//! attempt is [`stepped::execute`]'s loop of calls).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::protocol::{JobDef, RunRequest};
pub(crate) use super::target::Target;
use super::{protocol, stepped, v2_runs};
use crate::io::Io;
use crate::model::JobError;

/// Defines `def` in `engine` with a body that runs it at `target`.
pub(crate) fn define(
    engine: &crate::Engine,
    target: &Arc<Target>,
    def: &JobDef,
) -> Result<(), String> {
    let job = def.to_job()?;
    let timeout = def
        .timeout_ms
        .map_or(Duration::from_secs(300), Duration::from_millis);
    let max_attempts = def
        .retry
        .as_ref()
        .and_then(|r| r.max_attempts)
        .unwrap_or(crate::RetryPolicy::default().max_attempts);
    let target = Arc::clone(target);
    let (job_id, version) = (def.id.clone(), def.version.clone());
    let stepped = def.protocol == Some(protocol::PROTOCOL_STEPS);
    let job = job.run(move |payload: Value, io: Io| {
        let target = Arc::clone(&target);
        let (job_id, version) = (job_id.clone(), version.clone());
        async move {
            if stepped {
                let job = (job_id.as_str(), version.as_str());
                return stepped::execute(&target, job, max_attempts, timeout, payload, io).await;
            }
            execute(
                &target,
                &job_id,
                &version,
                max_attempts,
                timeout,
                payload,
                io,
            )
            .await
        }
    });
    let (spec, handler) = job.validate().map_err(|e| e.to_string())?;
    engine.define_local(spec, handler);
    Ok(())
}

/// Defines the Trigger.dev v2 job `def` in `engine` with a body that executes it at `target`.
pub(crate) fn define_v2(
    engine: &crate::Engine,
    target: &Arc<v2_runs::V2Target>,
    def: &JobDef,
) -> Result<(), String> {
    let job = def.to_job()?;
    let timeout = def
        .timeout_ms
        .map_or(Duration::from_secs(300), Duration::from_millis);
    let target = Arc::clone(target);
    let (job_id, version) = (def.id.clone(), def.version.clone());
    let job = job.run(move |payload: Value, io: Io| {
        let target = Arc::clone(&target);
        let (job_id, version) = (job_id.clone(), version.clone());
        async move { v2_runs::execute(&target, (&job_id, &version), timeout, payload, io).await }
    });
    let (spec, handler) = job.validate().map_err(|e| e.to_string())?;
    engine.define_local(spec, handler);
    Ok(())
}

/// One attempt of an endpoint job: the `run` call, then its answer's logs, events and outcome.
pub(crate) async fn execute(
    target: &Target,
    job_id: &str,
    version: &str,
    max_attempts: u32,
    timeout: Duration,
    payload: Value,
    io: Io,
) -> Result<Value, JobError> {
    let body = RunRequest {
        run_id: io.run_id(),
        attempt: io.attempt(),
        max_attempts,
        job_id,
        job_version: version,
        event_id: io.event_id(),
        event_name: io.event_name(),
        payload,
    }
    .to_json();
    // Just inside the executor's own bound, so that the endpoint's health records the timeout.
    let bound = timeout
        .saturating_sub(Duration::from_millis(5))
        .max(Duration::from_millis(1));
    let now = || target.clock.now_ms();
    let failed = |e: String| {
        target.reports.error(
            &target.id,
            now(),
            format!(
                "run {} (job {job_id}, attempt {}): {e}",
                io.run_id(),
                io.attempt()
            ),
        );
        JobError::from(e)
    };
    let answer = target
        .caller
        .call(&target.url, &target.secret, &body, bound)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let answer =
        protocol::parse_run_answer(answer).map_err(|e| failed(format!("invalid answer: {e}")))?;
    target.reports.ok(&target.id, now());
    for (level, message, fields) in answer.logs {
        io.logger.log(level, message, fields);
    }
    if !answer.events.is_empty() {
        io.send_keyed(answer.events)
            .await
            .map_err(|e| JobError::from(format!("could not send the answer's events: {e}")))?;
    }
    match answer.outcome {
        Some(Ok(output)) => Ok(output),
        Some(Err((message, true))) => Err(JobError::from(message)),
        Some(Err((message, false))) => Err(JobError::fatal(message)),
        None => Err(JobError::from("the answer has neither output nor error")),
    }
}
