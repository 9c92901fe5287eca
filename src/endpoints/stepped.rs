//! Version 2 of the endpoint protocol: durable steps over HTTP (written down for SDK authors in
//! `docs/endpoints.md`, "Protocol version 2").
//!
//! A run request carries the run's stored steps (key → output or error); the endpoint runs the
//! job from the top, returning stored results for the steps they name, and answers with what it
//! reached: completed `run` steps, then possibly one request Flare carries out (a `sleep`, events
//! to send), or the final output or error. One attempt is a loop of such calls:
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
//! - **Non-determinism**: a key answered as another kind of step than it is stored as means the
//!   job's code changed under the run; the run fails at once saying so. (A stored step that no
//!   longer comes back can only be seen by the SDK, which answers a fatal error: the document.)
//! - **Progress**: an answer without an outcome must reach a step that is not stored yet;
//!   otherwise calling again would get the same answer, and the run fails saying so.
//! - **`waitForEvent`** is the engine's durable wait for an event (`Steps::wait_for_event`, what
//!   `io.wait_for_event` does): the execution suspends holding no slot until the first matching
//!   event sent after the wait was reached, or its timeout; the store records the step's result
//!   (the event `{id, name, payload, timestamp}`, or `null` on timeout) and the next call sends it.
//!   A wait still pending when the run executes again (its timeout passed) is not sent: the
//!   endpoint answers it again, and the engine ends it with `null` (or suspends again).
//! - `invoke` and `callback` are reserved: refused as not supported yet.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::protocol::{parse_event, parse_events, parse_logs, RunRequest, MAX_EVENTS};
use super::target::Target;
use crate::client::SendEvent;
use crate::engine::steps::MAX_STEP_KEY_LEN;
use crate::io::Io;
use crate::model::wait::MAX_WAIT_TEXT_LEN;
use crate::model::{JobError, Level, StepKind, StepStatus};

/// Most steps one answer may report.
pub const MAX_STEPS_PER_ANSWER: usize = 100;

/// Most calls in one attempt (each answer must make progress: a step or the outcome).
pub const MAX_CALLS_PER_ATTEMPT: usize = 1_000;

/// Longest `sleep`: ten years.
pub const MAX_SLEEP_MS: u64 = 10 * 365 * 86_400_000;

/// The step kinds reserved for later versions of Flare (refused with a clear error today).
pub const COMING_OPS: [&str; 2] = ["invoke", "callback"];

/// What one reported step asks for.
#[derive(Debug)]
pub enum Op {
    /// A `run` step's result: its output, or its error.
    Run(Result<Value, String>),
    /// Sleep until a time (ms), or for a duration (ms) from when Flare first reads it.
    Sleep {
        /// Due time, ms since the epoch.
        until: Option<i64>,
        /// Or a duration, ms.
        duration_ms: Option<u64>,
    },
    /// Events to send, each with its key within the step.
    SendEvent(Vec<(String, SendEvent)>),
    /// Wait for an event (see [`crate::Io::wait_for_event`]).
    WaitForEvent {
        /// The event name waited for.
        event: String,
        /// `payload.<field>`: equal in the run's event and the incoming one.
        match_path: Option<String>,
        /// A CEL condition over `event` and `async`.
        condition: Option<String>,
        /// At most this long, ms.
        timeout_ms: u64,
    },
}

impl Op {
    fn kind(&self) -> StepKind {
        match self {
            Op::Run(_) => StepKind::Task,
            Op::Sleep { .. } => StepKind::Wait,
            Op::SendEvent(_) => StepKind::Event,
            Op::WaitForEvent { .. } => StepKind::EventWait,
        }
    }
}

/// The protocol's name for a stored kind.
fn op_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Task => "run",
        StepKind::Wait => "sleep",
        StepKind::Event => "sendEvent",
        StepKind::EventWait => "waitForEvent",
        // Protocol v2 reserves these ("coming"); a Rust job's steps of these kinds are named alike.
        StepKind::Invoke => "invoke",
        StepKind::Callback => "callback",
    }
}

/// A version-2 `run` answer.
#[derive(Debug, Default)]
pub struct SteppedAnswer {
    /// The steps it reached, in order.
    pub steps: Vec<(String, Op)>,
    /// `Ok(output)` or `Err((message, retry))`; `None`: call again (or carry out the request).
    pub outcome: Option<Result<Value, (String, bool)>>,
    /// Log lines.
    pub logs: Vec<(Level, String, Option<Value>)>,
    /// Chained events, as version 1 has them.
    pub events: Vec<(String, SendEvent)>,
}

/// Reads a version-2 `run` answer, or what is wrong with it.
pub fn parse_answer(answer: Value) -> Result<SteppedAnswer, String> {
    let Value::Object(fields) = answer else {
        return Err(
            "the answer must be a JSON object with \"steps\", \"output\" or \"error\"".into(),
        );
    };
    let mut out = SteppedAnswer::default();
    let (mut output, mut error, mut retry) = (None, None, true);
    for (key, value) in fields {
        match key.as_str() {
            "output" => output = Some(value),
            "error" => match value {
                Value::String(s) if !s.is_empty() => error = Some(s),
                _ => return Err("\"error\" must be a non-empty string".into()),
            },
            "retry" => match value {
                Value::Bool(b) => retry = b,
                _ => return Err("\"retry\" must be true or false".into()),
            },
            "steps" => out.steps = parse_steps(value)?,
            "logs" => out.logs = parse_logs(value)?,
            "events" => out.events = parse_events(value)?,
            other => {
                return Err(format!(
                    "unknown field {other:?} in the answer (expected steps, output or error, and optionally retry, logs, events)"
                ))
            }
        }
    }
    out.outcome = match (output, error) {
        (Some(_), Some(_)) => {
            return Err("the answer has both \"output\" and \"error\"; give one".into())
        }
        (Some(v), None) => Some(Ok(v)),
        (None, Some(e)) => Some(Err((e, retry))),
        (None, None) if out.steps.is_empty() => {
            return Err("the answer has neither \"steps\" nor \"output\" nor \"error\"".into())
        }
        (None, None) => None,
    };
    if let Some((i, (key, _))) = out
        .steps
        .iter()
        .enumerate()
        .find(|(_, (_, op))| !matches!(op, Op::Run(_)))
    {
        if i + 1 != out.steps.len() || out.outcome.is_some() {
            return Err(format!(
                "steps[{i}] ({key:?}) suspends the run: it must be the answer's last step, without \"output\" or \"error\""
            ));
        }
    }
    Ok(out)
}

fn parse_steps(value: Value) -> Result<Vec<(String, Op)>, String> {
    let Value::Array(steps) = value else {
        return Err("\"steps\" must be an array".into());
    };
    if steps.len() > MAX_STEPS_PER_ANSWER {
        return Err(format!(
            "an answer may report at most {MAX_STEPS_PER_ANSWER} steps"
        ));
    }
    let mut keys = HashSet::new();
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.into_iter().enumerate() {
        let Value::Object(f) = step else {
            return Err(format!(
                "steps[{i}] must be an object {{\"key\", \"op\", …}}"
            ));
        };
        let (key, op) = parse_step(f).map_err(|e| format!("steps[{i}]: {e}"))?;
        if !keys.insert(key.clone()) {
            return Err(format!(
                "steps[{i}]: the key {key:?} is answered twice; step keys are unique within a run"
            ));
        }
        out.push((key, op));
    }
    Ok(out)
}

fn parse_step(mut f: Map<String, Value>) -> Result<(String, Op), String> {
    let key = match f.remove("key") {
        Some(Value::String(s))
            if !s.is_empty() && s.len() <= MAX_STEP_KEY_LEN && crate::store::storable(&s) =>
        {
            s
        }
        _ => {
            return Err(format!(
                "\"key\" must be a string of 1-{MAX_STEP_KEY_LEN} bytes without NUL"
            ))
        }
    };
    let op = match f.remove("op") {
        Some(Value::String(s)) => s,
        _ => return Err(format!("step {key:?}: \"op\" must be a string")),
    };
    let allowed: &[&str] = match op.as_str() {
        "run" => &["output", "error"],
        "sleep" => &["until", "durationMs"],
        "sendEvent" => &["events"],
        "waitForEvent" => &["event", "match", "if", "timeoutMs"],
        o if COMING_OPS.contains(&o) => {
            return Err(format!(
                "step {key:?}: {o:?} steps are not supported by this version of Flare yet"
            ))
        }
        o => {
            return Err(format!(
                "step {key:?}: unknown op {o:?} (expected run, sleep, sendEvent or waitForEvent)"
            ))
        }
    };
    if let Some(k) = f.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("step {key:?} ({op}): unknown field {k:?}"));
    }
    let parsed = match op.as_str() {
        "run" => match (f.remove("output"), f.remove("error")) {
            (Some(v), None) => Op::Run(Ok(v)),
            (None, Some(Value::String(e))) if !e.is_empty() => Op::Run(Err(e)),
            (None, Some(_)) => {
                return Err(format!(
                    "step {key:?}: \"error\" must be a non-empty string"
                ))
            }
            _ => {
                return Err(format!(
                    "step {key:?}: a run step has exactly one of \"output\" or \"error\""
                ))
            }
        },
        "sleep" => match (f.remove("until"), f.remove("durationMs")) {
            (Some(at), None) => {
                let at = at
                    .as_str()
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                    .ok_or_else(|| {
                        format!("step {key:?}: \"until\" must be an RFC 3339 time such as 2030-01-01T09:00:00Z")
                    })?;
                Op::Sleep {
                    until: Some(at.timestamp_millis()),
                    duration_ms: None,
                }
            }
            (None, Some(ms)) => match ms.as_u64() {
                Some(ms) if ms <= MAX_SLEEP_MS => Op::Sleep {
                    until: None,
                    duration_ms: Some(ms),
                },
                _ => {
                    return Err(format!(
                        "step {key:?}: \"durationMs\" must be a whole number of ms, at most {MAX_SLEEP_MS} (ten years)"
                    ))
                }
            },
            _ => {
                return Err(format!(
                    "step {key:?}: a sleep has exactly one of \"until\" or \"durationMs\""
                ))
            }
        },
        "waitForEvent" => parse_wait_for_event(&key, f)?,
        _ => {
            let Some(Value::Array(events)) = f.remove("events") else {
                return Err(format!("step {key:?}: \"events\" must be an array"));
            };
            if events.is_empty() || events.len() > MAX_EVENTS {
                return Err(format!(
                    "step {key:?}: \"events\" holds 1 to {MAX_EVENTS} events"
                ));
            }
            let mut keys = HashSet::new();
            let mut sends = Vec::with_capacity(events.len());
            for (i, event) in events.into_iter().enumerate() {
                let Value::Object(e) = event else {
                    return Err(format!("step {key:?}: events[{i}] must be an object"));
                };
                let (k, send) =
                    parse_event(i, e).map_err(|e| format!("step {key:?}: events[{i}]: {e}"))?;
                if !keys.insert(k.clone()) {
                    return Err(format!(
                        "step {key:?}: events[{i}]: the key {k:?} is used twice"
                    ));
                }
                sends.push((k, send));
            }
            Op::SendEvent(sends)
        }
    };
    Ok((key, parsed))
}

fn parse_wait_for_event(key: &str, mut f: Map<String, Value>) -> Result<Op, String> {
    let event = match f.remove("event") {
        Some(Value::String(s)) if crate::model::validate_event_name(&s).is_ok() => s,
        _ => {
            return Err(format!(
                "step {key:?}: \"event\" must be the name of the event waited for, such as \"invoice.paid\""
            ))
        }
    };
    let text = |field: &str, v: Option<Value>| match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_WAIT_TEXT_LEN => Ok(Some(s)),
        _ => Err(format!(
            "step {key:?}: {field:?} must be a string of 1-{MAX_WAIT_TEXT_LEN} bytes"
        )),
    };
    let match_path = text("match", f.remove("match"))?;
    let condition = text("if", f.remove("if"))?;
    let timeout_ms = match f.remove("timeoutMs").map(|v| v.as_u64()) {
        Some(Some(ms)) if ms <= MAX_SLEEP_MS => ms,
        _ => {
            return Err(format!(
                "step {key:?}: \"timeoutMs\" must be a whole number of ms, at most {MAX_SLEEP_MS} (ten years)"
            ))
        }
    };
    Ok(Op::WaitForEvent {
        event,
        match_path,
        condition,
        timeout_ms,
    })
}

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
    // What the endpoint is told of each stored step, and the kind it is stored as.
    let mut done: Map<String, Value> = Map::new();
    let mut kinds: HashMap<String, StepKind> = HashMap::new();
    for step in stored {
        kinds.insert(step.key.clone(), step.kind);
        match (step.kind, step.status) {
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
            }
            if done.get(&key).is_some_and(|d| d.get("output").is_some()) {
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
                    let until = until.unwrap_or_else(|| {
                        let ms = i64::try_from(duration_ms.unwrap_or(0)).unwrap_or(i64::MAX / 2);
                        now.saturating_add(ms)
                    });
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
                            i64::try_from(timeout_ms).unwrap_or(i64::MAX / 2),
                        )
                        .await
                        .map_err(|e| {
                            if e.is_retryable() {
                                e
                            } else {
                                JobError::fatal(format!("step {key:?}: {}", e.message()))
                            }
                        })?;
                    let output = serde_json::to_value(waited).unwrap_or(Value::Null);
                    done.insert(key, json!({ "output": output }));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_report_steps_then_a_request_or_the_outcome() {
        let a = parse_answer(json!({"steps": [
            {"key": "a", "op": "run", "output": {"n": 1}},
            {"key": "b", "op": "run", "output": null},
            {"key": "c", "op": "run", "error": "boom"},
            {"key": "nap", "op": "sleep", "durationMs": 1000}
        ]}))
        .expect("valid");
        assert_eq!(a.steps.len(), 4);
        assert!(a.outcome.is_none());
        assert!(matches!(a.steps[1].1, Op::Run(Ok(Value::Null))));
        assert!(matches!(a.steps[2].1, Op::Run(Err(ref e)) if e == "boom"));
        let a =
            parse_answer(json!({"steps": [{"key": "a", "op": "run", "output": 1}], "output": 2}))
                .expect("valid");
        assert!(matches!(a.outcome, Some(Ok(_))));
        let a = parse_answer(json!({"steps": [{"key": "s", "op": "sendEvent",
            "events": [{"name": "a.b", "payload": {}}, {"name": "a.c", "key": "k"}]}]}))
        .expect("valid");
        assert!(matches!(&a.steps[0].1, Op::SendEvent(e) if e[0].0 == "0" && e[1].0 == "k"));
        let a = parse_answer(
            json!({"steps": [{"key": "s", "op": "sleep", "until": "2030-01-01T00:00:00Z"}]}),
        )
        .expect("valid");
        assert!(matches!(a.steps[0].1, Op::Sleep { until: Some(_), .. }));
        let a = parse_answer(json!({"steps": [{"key": "w", "op": "waitForEvent",
            "event": "invoice.paid", "match": "payload.invoiceId", "if": "async.payload.n > 1",
            "timeoutMs": 60000}]}))
        .expect("valid");
        assert!(
            matches!(&a.steps[0].1, Op::WaitForEvent { event, match_path: Some(m), condition: Some(_), timeout_ms: 60_000 }
            if event == "invoice.paid" && m == "payload.invoiceId")
        );
    }

    #[test]
    fn bad_answers_say_what_is_wrong() {
        let cases = [
            (json!({}), "neither"),
            (json!({"steps": "x"}), "must be an array"),
            (json!({"steps": [{"op": "run", "output": 1}]}), "\"key\""),
            (json!({"steps": [{"key": "a", "op": "run"}]}), "exactly one"),
            (
                json!({"steps": [{"key": "a", "op": "run", "output": 1, "error": "x"}]}),
                "exactly one",
            ),
            (json!({"steps": [{"key": "a", "op": "fly"}]}), "unknown op"),
            (
                json!({"steps": [{"key": "a", "op": "callback"}]}),
                "not supported by this version",
            ),
            (
                json!({"steps": [{"key": "a", "op": "waitForEvent", "timeoutMs": 5}]}),
                "\"event\" must be the name",
            ),
            (
                json!({"steps": [{"key": "a", "op": "waitForEvent", "event": "x.y"}]}),
                "\"timeoutMs\"",
            ),
            (
                json!({"steps": [{"key": "a", "op": "waitForEvent", "event": "x.y", "timeoutMs": 5, "match": 3}]}),
                "\"match\" must be a string",
            ),
            (
                json!({"steps": [{"key": "a", "op": "waitForEvent", "event": "x.y", "timeoutMs": 5, "timeout": 5}]}),
                "unknown field \"timeout\"",
            ),
            (
                json!({"steps": [{"key": "a", "op": "waitForEvent", "event": "x.y", "timeoutMs": 5}, {"key": "b", "op": "run", "output": 1}]}),
                "last step",
            ),
            (
                json!({"steps": [{"key": "a", "op": "invoke"}]}),
                "not supported by this version",
            ),
            (
                json!({"steps": [{"key": "a", "op": "sleep", "until": "tomorrow"}]}),
                "RFC 3339",
            ),
            (
                json!({"steps": [{"key": "a", "op": "sleep", "durationMs": -1}]}),
                "durationMs",
            ),
            (
                json!({"steps": [{"key": "a", "op": "sleep", "durationMs": 5, "x": 1}]}),
                "unknown field \"x\"",
            ),
            (
                json!({"steps": [{"key": "a", "op": "sendEvent", "events": []}]}),
                "1 to 100",
            ),
            (
                json!({"steps": [{"key": "a", "op": "run", "output": 1}, {"key": "a", "op": "run", "output": 2}]}),
                "answered twice",
            ),
            (
                json!({"steps": [{"key": "a", "op": "sleep", "durationMs": 5}, {"key": "b", "op": "run", "output": 2}]}),
                "last step",
            ),
            (
                json!({"steps": [{"key": "a", "op": "sleep", "durationMs": 5}], "output": 1}),
                "last step",
            ),
            (json!({"output": 1, "error": "x"}), "both"),
            (
                json!({"output": 1, "result": 1}),
                "unknown field \"result\"",
            ),
        ];
        for (answer, expected) in cases {
            let err = parse_answer(answer.clone()).expect_err(&answer.to_string());
            assert!(err.contains(expected), "{answer}: {err}");
        }
    }
}
