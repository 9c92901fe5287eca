//! The answer to a version-2 `run` request, read strictly (the protocol is written down for SDK
//! authors in `docs/endpoints.md`, "Protocol version 2"): the steps the endpoint reached, each a
//! `run` step's result or one request Flare carries out (`sleep`, `sendEvent`, `waitForEvent`,
//! `invoke`, `callback`, `waitForCallback`), then the outcome, log lines and chained events. What
//! Flare does with them is [`super::stepped`]'s.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::protocol::{parse_event, parse_events, parse_logs, MAX_EVENTS};
use crate::client::SendEvent;
use crate::engine::steps::MAX_STEP_KEY_LEN;
use crate::model::wait::MAX_WAIT_TEXT_LEN;
use crate::model::{Level, StepKind};

/// Most steps one answer may report.
pub const MAX_STEPS_PER_ANSWER: usize = 100;

/// Longest `sleep`: ten years.
pub const MAX_SLEEP_MS: u64 = 10 * 365 * 86_400_000;

/// Longest job id an `invoke` step names (job ids are 1-100 bytes).
const MAX_JOB_ID_LEN: usize = 100;

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
    /// Run job `job` with `payload` (see [`crate::Io::invoke`]) and wait for its outcome.
    Invoke {
        /// The invoked job's id.
        job: String,
        /// Its run's payload.
        payload: Value,
        /// At most this long, ms.
        timeout_ms: u64,
    },
    /// Make a callback URL (see [`crate::Io::callback`]) accepted for `timeout_ms`.
    Callback {
        /// From when Flare creates it, ms.
        timeout_ms: u64,
    },
    /// Wait for the post to the callback of the same key.
    WaitForCallback,
}

impl Op {
    /// The kind the step is stored as (a callback and its wait are one step).
    pub fn kind(&self) -> StepKind {
        match self {
            Op::Run(_) => StepKind::Task,
            Op::Sleep { .. } => StepKind::Wait,
            Op::SendEvent(_) => StepKind::Event,
            Op::WaitForEvent { .. } => StepKind::EventWait,
            Op::Invoke { .. } => StepKind::Invoke,
            Op::Callback { .. } | Op::WaitForCallback => StepKind::Callback,
        }
    }
}

/// The protocol's name for a stored kind.
pub fn op_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Task => "run",
        StepKind::Wait => "sleep",
        StepKind::Event => "sendEvent",
        StepKind::EventWait => "waitForEvent",
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
        "invoke" => &["job", "payload", "timeoutMs"],
        "callback" => &["timeoutMs"],
        "waitForCallback" => &[],
        o => {
            return Err(format!(
                "step {key:?}: unknown op {o:?} (expected run, sleep, sendEvent, waitForEvent, invoke, callback or waitForCallback)"
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
        "invoke" => {
            let job = match f.remove("job") {
                Some(Value::String(s))
                    if !s.is_empty()
                        && s.len() <= MAX_JOB_ID_LEN
                        && crate::store::storable(&s) =>
                {
                    s
                }
                _ => {
                    return Err(format!(
                        "step {key:?}: \"job\" must be the id of the job to run, such as \"send-tips\""
                    ))
                }
            };
            Op::Invoke {
                job,
                payload: f.remove("payload").unwrap_or(Value::Null),
                timeout_ms: timeout_ms(&key, f.remove("timeoutMs"))?,
            }
        }
        "callback" => Op::Callback {
            timeout_ms: timeout_ms(&key, f.remove("timeoutMs"))?,
        },
        "waitForCallback" => Op::WaitForCallback,
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
    Ok(Op::WaitForEvent {
        event,
        match_path,
        condition,
        timeout_ms: timeout_ms(key, f.remove("timeoutMs"))?,
    })
}

/// A step's required `timeoutMs`: at most ten years.
fn timeout_ms(key: &str, value: Option<Value>) -> Result<u64, String> {
    match value.map(|v| v.as_u64()) {
        Some(Some(ms)) if ms <= MAX_SLEEP_MS => Ok(ms),
        _ => Err(format!(
            "step {key:?}: \"timeoutMs\" must be a whole number of ms, at most {MAX_SLEEP_MS} (ten years)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let a = parse_answer(
            json!({"steps": [{"key": "i", "op": "invoke", "job": "send-tips",
            "payload": {"team": 1}, "timeoutMs": 5000}]}),
        )
        .expect("valid");
        assert!(
            matches!(&a.steps[0].1, Op::Invoke { job, payload, timeout_ms: 5000 }
            if job == "send-tips" && payload == &json!({"team": 1}))
        );
        let a = parse_answer(
            json!({"steps": [{"key": "i", "op": "invoke", "job": "j", "timeoutMs": 1}]}),
        )
        .expect("valid");
        assert!(matches!(
            &a.steps[0].1,
            Op::Invoke {
                payload: Value::Null,
                ..
            }
        ));
        let a = parse_answer(json!({"steps": [{"key": "a", "op": "run", "output": 1},
            {"key": "c", "op": "callback", "timeoutMs": 86_400_000}]}))
        .expect("valid");
        assert!(matches!(
            a.steps[1].1,
            Op::Callback {
                timeout_ms: 86_400_000
            }
        ));
        assert_eq!(a.steps[1].1.kind(), StepKind::Callback);
        let a =
            parse_answer(json!({"steps": [{"key": "c", "op": "waitForCallback"}]})).expect("valid");
        assert!(matches!(a.steps[0].1, Op::WaitForCallback));
        assert_eq!(a.steps[0].1.kind(), StepKind::Callback);
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
                "\"timeoutMs\" must be a whole number",
            ),
            (
                json!({"steps": [{"key": "a", "op": "callback", "timeoutMs": 5, "url": "x"}]}),
                "unknown field \"url\"",
            ),
            (
                json!({"steps": [{"key": "a", "op": "waitForCallback", "timeoutMs": 5}]}),
                "unknown field \"timeoutMs\"",
            ),
            (
                json!({"steps": [{"key": "a", "op": "callback", "timeoutMs": 5}, {"key": "b", "op": "run", "output": 1}]}),
                "last step",
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
                json!({"steps": [{"key": "a", "op": "invoke", "timeoutMs": 5}]}),
                "\"job\" must be the id",
            ),
            (
                json!({"steps": [{"key": "a", "op": "invoke", "job": "", "timeoutMs": 5}]}),
                "\"job\" must be the id",
            ),
            (
                json!({"steps": [{"key": "a", "op": "invoke", "job": "j"}]}),
                "\"timeoutMs\"",
            ),
            (
                json!({"steps": [{"key": "a", "op": "invoke", "job": "j", "timeoutMs": 5}], "output": 1}),
                "last step",
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
