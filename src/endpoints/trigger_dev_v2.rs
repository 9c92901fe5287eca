//! The Trigger.dev v2 endpoint protocol, platform side: the messages Flare exchanges with an
//! application served by `@trigger.dev/sdk` 2.x (`client.handleRequest`), and how it reads them.
//!
//! Flare calls the endpoint with `x-trigger-api-key` (the key the endpoint was registered with)
//! and `x-trigger-action`: `PING` (with `x-trigger-endpoint-id`, the client id), `INDEX_ENDPOINT`
//! (its jobs: each with an `eventTrigger` becomes a Flare job, see [`translate_index`]) and
//! `EXECUTE_JOB` (a `RunJobBody`, see [`run_job_body`]), whose `RunJobResponse` is read by
//! [`parse_response`]. A run's execution is [`super::v2_runs`]; the tasks the SDK creates
//! meanwhile are [`super::v2_tasks`], and its callback tasks (`io.waitForEvent`,
//! `io.waitForRequest`, `invokeAndWaitForCompletion`) [`super::v2_callbacks`].

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::caller::{CallError, Caller};
use super::protocol::{JobDef, ScheduleDef, TriggerDef};

/// The platform version Flare announces (`x-trigger-version`): the SDK then uses serialized task
/// outputs, lazily loaded cached tasks and `io.yield`.
pub const SERVER_VERSION: &str = "2023-11-01";

/// The `Trigger-Version` of a task answer with lazily loaded cached tasks.
pub const LAZY_LOADED_CACHED_TASKS: &str = "2023-09-29";

/// Calls `action` at `url` with `key` and returns the JSON answer.
pub async fn call(
    caller: &Caller,
    url: &str,
    key: &str,
    action: &str,
    extra: &[(&str, String)],
    body: &Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    let mut headers = vec![
        ("x-trigger-api-key", key.to_string()),
        ("x-trigger-action", action.to_string()),
        ("x-trigger-version", SERVER_VERSION.to_string()),
    ];
    headers.extend(extra.iter().map(|(n, v)| (*n, v.clone())));
    let bytes = serde_json::to_vec(body).map_err(|e| CallError::NotJson(e.to_string()))?;
    caller.post(url, &headers, bytes, timeout).await
}

/// Reads a `PING` answer: `{ok: true}`, or the endpoint's reason.
pub fn parse_ping(answer: &Value) -> Result<(), String> {
    match answer.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(()),
        Some(false) => Err(answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the endpoint answered ok: false")
            .to_string()),
        None => Err(format!(
            "the PING answer is not {{\"ok\": true}}: {}",
            short(answer)
        )),
    }
}

/// A job of the endpoint's index that Flare does not take, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Skipped {
    /// The job id.
    pub id: String,
    /// Why.
    pub reason: String,
}

/// The index's features Flare has no counterpart for, each named (sources, webhooks, dynamic
/// triggers and schedules, HTTP endpoints).
const UNSUPPORTED_INDEX_PARTS: [(&str, &str); 5] = [
    ("sources", "external sources (integration triggers)"),
    ("webhooks", "webhook triggers"),
    ("dynamicTriggers", "dynamic triggers"),
    ("dynamicSchedules", "dynamic schedules"),
    ("httpEndpoints", "HTTP endpoints (io.createHttpEndpoint)"),
];

/// Translates an `INDEX_ENDPOINT` answer into Flare job definitions: each enabled job with an
/// `eventTrigger` (a static trigger on one event of source `trigger.dev`) becomes one, its
/// `payload` filter checked by Flare's filter rules. Every other job is skipped with a reason.
pub fn translate_index(answer: &Value) -> Result<(Vec<JobDef>, Vec<Skipped>), String> {
    let jobs = answer
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the index has no \"jobs\" array: {}", short(answer)))?;
    let mut defs = Vec::new();
    let mut skipped = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let id = job
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("jobs[{i}] has no id"))?
            .to_string();
        match translate_job(job) {
            Ok(def) => defs.push(def),
            Err(reason) => skipped.push(Skipped { id, reason }),
        }
    }
    for (field, what) in UNSUPPORTED_INDEX_PARTS {
        if let Some(parts) = answer.get(field).and_then(Value::as_array) {
            for part in parts {
                let id = part
                    .get("id")
                    .or_else(|| part.get("key"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                skipped.push(Skipped {
                    id: id.to_string(),
                    reason: format!("{what} are not supported by Flare"),
                });
            }
        }
    }
    Ok((defs, skipped))
}

fn translate_job(job: &Value) -> Result<JobDef, String> {
    let text = |field: &str| {
        job.get(field)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("the job has no {field:?}"))
    };
    let (id, name, version) = (text("id")?, text("name")?, text("version")?);
    if job.get("enabled").and_then(Value::as_bool) == Some(false) {
        return Err("the job is disabled (enabled: false)".into());
    }
    if job.get("internal").and_then(Value::as_bool) == Some(true) {
        return Err("an internal job of the SDK (integrations, sources)".into());
    }
    if job
        .get("integrations")
        .and_then(Value::as_object)
        .is_some_and(|i| !i.is_empty())
    {
        return Err("the job uses integrations, which Flare does not support".into());
    }
    let trigger = job.get("trigger").unwrap_or(&Value::Null);
    // A number limits the job; a shared `{id, limit}` is a group of that name.
    let concurrency = match job.get("concurrencyLimit") {
        Some(n @ Value::Number(_)) => Some(n.clone()),
        Some(Value::Object(shared)) => match (shared.get("id"), shared.get("limit")) {
            (Some(Value::String(id)), Some(limit)) => {
                Some(serde_json::json!({ "limit": limit, "group": id }))
            }
            _ => return Err("concurrencyLimit: expected a number or {id, limit}".into()),
        },
        _ => None,
    };
    let trigger = match trigger.get("type").and_then(Value::as_str) {
        Some("static") => event_trigger_def(trigger)?,
        Some("scheduled") => TriggerDef {
            event: None,
            filter: None,
            schedule: Some(schedule_def(trigger)?),
        },
        Some("dynamic") => return Err("dynamic triggers are not supported by Flare".into()),
        // Runs only when invoked (`invokeJob`): its runs' events are never broadcast.
        Some("invoke") => TriggerDef {
            event: Some(crate::model::wait::INVOKE_EVENT.to_string()),
            filter: None,
            schedule: None,
        },
        other => return Err(format!("unknown trigger type {other:?}")),
    };
    let def = JobDef {
        id,
        name,
        version,
        trigger,
        retry: None,
        timeout_ms: None,
        concurrency,
        protocol: None,
        rate_limit: None,
        throttle: None,
        start_timeout_ms: None,
        debounce: None,
        priority: None,
        cancel_on: None,
    };
    def.to_job()
        .and_then(|j| {
            j.run(|_: Value, _| async { Ok(Value::Null) })
                .validate()
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .map(|()| def)
}

/// A `cronTrigger` (`{type: "cron", options: {cron}}`, UTC as in Trigger.dev) or an
/// `intervalTrigger` (`{type: "interval", options: {seconds}}`) as a Flare schedule.
fn schedule_def(trigger: &Value) -> Result<ScheduleDef, String> {
    let schedule = trigger.get("schedule").unwrap_or(&Value::Null);
    let options = schedule.get("options").unwrap_or(&Value::Null);
    let def = match schedule.get("type").and_then(Value::as_str) {
        Some("cron") => ScheduleDef {
            cron: Some(
                options
                    .get("cron")
                    .and_then(Value::as_str)
                    .ok_or("the cronTrigger has no options.cron")?
                    .to_string(),
            ),
            timezone: None,
            interval_seconds: None,
        },
        Some("interval") => ScheduleDef {
            cron: None,
            timezone: None,
            interval_seconds: Some(
                options
                    .get("seconds")
                    .and_then(Value::as_u64)
                    .ok_or("the intervalTrigger has no whole options.seconds")?,
            ),
        },
        other => return Err(format!("unknown schedule type {other:?}")),
    };
    def.to_schedule()?;
    Ok(def)
}

/// An `eventTrigger` (`{type: "static", rule: {event, source, payload}}`) as a Flare trigger.
fn event_trigger_def(trigger: &Value) -> Result<TriggerDef, String> {
    let rule = trigger.get("rule").unwrap_or(&Value::Null);
    let source = rule.get("source").and_then(Value::as_str).unwrap_or("");
    if source != "trigger.dev" {
        return Err(format!(
            "the trigger's source is {source:?}: triggers of integrations and webhooks are not supported (only eventTrigger)"
        ));
    }
    let event = match rule.get("event") {
        Some(Value::String(e)) => e.clone(),
        Some(Value::Array(names)) => match names.as_slice() {
            [Value::String(e)] => e.clone(),
            _ => return Err("a trigger on several event names is not supported".into()),
        },
        _ => return Err("the trigger names no event".into()),
    };
    if rule.get("context").is_some_and(|c| !c.is_null()) {
        return Err("a filter on the event's context is not supported (only payload)".into());
    }
    // The SDK sends `payload: {}` for an eventTrigger without a filter.
    let filter = rule
        .get("payload")
        .filter(|f| !f.is_null() && f.as_object().is_none_or(|o| !o.is_empty()))
        .cloned();
    if let Some(filter) = &filter {
        crate::filter::Filter::parse(filter).map_err(|e| e.to_string())?;
    }
    Ok(TriggerDef {
        event: Some(event),
        filter,
        schedule: None,
    })
}

/// What a `RunJobBody` carries besides the cached tasks.
pub struct RunJob<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// Job id and version.
    pub job: (&'a str, &'a str),
    /// The event: id, name, payload, context, timestamp.
    pub event: Value,
    /// When the run's first execution started (RFC 3339).
    pub started_at: String,
    /// A later attempt.
    pub is_retry: bool,
    /// `io.yield` keys already yielded.
    pub yielded: &'a [String],
    /// How long this execution may take, ms (the SDK yields before).
    pub limit_ms: u64,
}

/// The `RunJobBody` of an `EXECUTE_JOB` call, with `tasks` (the run's cached tasks).
pub fn run_job_body(run: &RunJob<'_>, tasks: Vec<Value>) -> Value {
    json!({
        "event": run.event,
        "job": { "id": run.job.0, "version": run.job.1 },
        "run": { "id": run.run_id, "isTest": false, "isRetry": run.is_retry, "startedAt": run.started_at },
        "environment": { "id": "flare", "slug": "flare", "type": "PRODUCTION" },
        "organization": { "id": "flare", "title": "Flare", "slug": "flare" },
        "project": { "id": "flare", "name": "Flare", "slug": "flare" },
        "tasks": tasks,
        "connections": {},
        "yieldedExecutions": run.yielded,
        "runChunkExecutionLimit": run.limit_ms,
    })
}

/// An error as the SDK reports it (`ErrorWithStack`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorWithStack {
    /// Message.
    pub message: String,
    /// Error class.
    #[serde(default)]
    pub name: Option<String>,
    /// Stack trace.
    #[serde(default)]
    pub stack: Option<String>,
}

impl ErrorWithStack {
    /// `name: message` (or the message alone).
    pub fn text(&self) -> String {
        match self.name.as_deref() {
            Some(name) if !name.is_empty() && name != "Error" => {
                format!("{name}: {}", self.message)
            }
            _ => self.message.clone(),
        }
    }
}

/// The task named in an answer (only its id is used: Flare holds the task itself).
#[derive(Debug, Clone, Deserialize)]
pub struct TaskRef {
    /// Flare's task id.
    pub id: String,
}

/// A `RunJobResponse`. The SDK tags it with a `status` field; [`parse_response`] moves the rest
/// under that status and reads it externally tagged, because serde reads an internally tagged
/// enum from its own buffer, where a struct would also be taken from an array (see
/// [`crate::strict_json`]).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunJobResponse {
    /// The run returned.
    Success {
        /// Its output.
        #[serde(default)]
        output: Option<Value>,
    },
    /// The run threw.
    Error {
        /// The error.
        error: ErrorWithStack,
        /// The task that errored.
        #[serde(default)]
        task: Option<TaskRef>,
    },
    /// A task failed and is retried at `retryAt`.
    RetryWithTask {
        /// The task.
        task: TaskRef,
        /// Its error.
        error: ErrorWithStack,
        /// When to retry.
        #[serde(rename = "retryAt")]
        retry_at: chrono::DateTime<chrono::Utc>,
    },
    /// A task is waiting (`io.wait`): resume when it is due.
    ResumeWithTask {
        /// The task.
        task: TaskRef,
    },
    /// As `RESUME_WITH_TASK` for a parallel task.
    ResumeWithParallelTask {
        /// The task.
        task: TaskRef,
    },
    /// `io.yield(key)`: execute again at once with `key` yielded.
    YieldExecution {
        /// The key.
        key: String,
    },
    /// The SDK stopped before its time limit: execute again at once.
    AutoYieldExecution {},
    /// As `AUTO_YIELD_EXECUTION`, with a task's output to complete first.
    AutoYieldExecutionWithCompletedTask {
        /// Task id.
        id: String,
        /// Its serialized output.
        #[serde(default)]
        output: Option<String>,
    },
    /// Rate limited: execute again at `reset` (ms).
    AutoYieldRateLimit {
        /// When, ms since the epoch.
        reset: i64,
    },
    /// A task was cancelled.
    Canceled {},
    /// The payload failed the job's schema.
    InvalidPayload {
        /// The schema errors.
        #[serde(default)]
        errors: Value,
    },
    /// An integration's auth could not be resolved.
    UnresolvedAuthError {
        /// The issues.
        #[serde(default)]
        issues: Value,
    },
}

/// Reads an `EXECUTE_JOB` answer strictly, or says what is wrong with it.
pub fn parse_response(answer: Value) -> Result<RunJobResponse, String> {
    let shown = short(&answer);
    let Value::Object(mut fields) = answer else {
        return Err(format!("the answer is not a JSON object: {shown}"));
    };
    let Some(Value::String(status)) = fields.remove("status") else {
        return Err(format!("the answer has no \"status\": {shown}"));
    };
    let tagged = Value::Object(
        [(status.clone(), Value::Object(fields))]
            .into_iter()
            .collect(),
    );
    crate::strict_json::from_value(tagged)
        .map_err(|e| format!("invalid {status} answer ({e}): {shown}"))
}

/// At most 300 characters of `value`, for error messages.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 300 {
        text.chars().take(299).chain(['…']).collect()
    } else {
        text
    }
}

/// Trigger.dev's `ApiEventLog`.
pub fn event_log(event: &crate::model::StoredEvent) -> Value {
    json!({
        "id": event.id,
        "name": event.name,
        "payload": event.payload,
        "context": event.context,
        "timestamp": event.timestamp,
        "deliverAt": event.deliver_at,
        "deliveredAt": event.delivered_at,
        "cancelledAt": event.cancelled_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(trigger: Value) -> Value {
        json!({"id": "a", "name": "A", "version": "1.0.0", "trigger": trigger, "integrations": {},
               "internal": false, "enabled": true, "startPosition": "latest", "preprocessRuns": false,
               "event": {"name": "x", "title": "x", "source": "trigger.dev", "icon": "x"}})
    }

    #[test]
    fn event_and_schedule_triggers_become_jobs_and_the_rest_is_skipped_with_a_reason() {
        let index = json!({"jobs": [
            job(json!({"type": "static", "title": "t", "rule": {"event": "user.created", "source": "trigger.dev",
                       "payload": {"plan": ["pro"], "amount": [{"$gte": 10}]}}})),
            {"id": "cron", "name": "C", "version": "1.0.0", "trigger": {"type": "scheduled", "schedule": {}}},
            {"id": "nightly", "name": "N", "version": "1.0.0", "trigger": {"type": "scheduled",
              "schedule": {"type": "cron", "options": {"cron": "0 0 * * *"}}}},
            {"id": "poll", "name": "P", "version": "1.0.0", "trigger": {"type": "scheduled",
              "schedule": {"type": "interval", "options": {"seconds": 300}}}},
            {"id": "send-tips", "name": "T", "version": "1.0.0", "trigger": {"type": "invoke"}},
            {"id": "bad", "name": "B", "version": "1.0.0", "trigger": {"type": "static", "title": "t",
              "rule": {"event": "x.y", "source": "trigger.dev", "payload": {"a": [{"$isNull": true}]}}}},
        ], "sources": [{"key": "github"}]});
        let (defs, skipped) = translate_index(&index).expect("index");
        assert_eq!(defs.len(), 4);
        // An invokeTrigger job runs when invoked, on an event never broadcast.
        assert_eq!(defs[3].trigger.event.as_deref(), Some("flare/job.invoked"));
        assert_eq!(defs[0].trigger.event.as_deref(), Some("user.created"));
        assert!(defs[0].trigger.filter.is_some());
        // cronTrigger and intervalTrigger jobs become scheduled jobs (cron in UTC, as in v2).
        let schedule = |i: usize| defs[i].trigger.schedule.clone().expect("a schedule");
        assert_eq!(schedule(1).cron.as_deref(), Some("0 0 * * *"));
        assert_eq!(schedule(1).timezone, None);
        assert_eq!(schedule(2).interval_seconds, Some(300));
        assert!(defs[1].trigger.event.is_none() && defs[2].trigger.event.is_none());
        let reasons: Vec<_> = skipped
            .iter()
            .map(|s| (s.id.as_str(), s.reason.as_str()))
            .collect();
        assert!(reasons[0].1.contains("schedule type"), "{reasons:?}");
        assert!(reasons[1].1.contains("$isNull"), "{reasons:?}");
        assert!(reasons[2].1.contains("external sources"), "{reasons:?}");
    }

    #[test]
    fn answers_are_read_strictly() {
        assert!(matches!(
            parse_response(json!({"status": "SUCCESS", "output": {"a": 1}})),
            Ok(RunJobResponse::Success { .. })
        ));
        assert!(matches!(
            parse_response(
                json!({"status": "RESUME_WITH_TASK", "task": {"id": "t", "name": "wait"}})
            ),
            Ok(RunJobResponse::ResumeWithTask { .. })
        ));
        let e = parse_response(json!({"status": "ERROR"})).expect_err("no error field");
        assert!(e.contains("invalid ERROR answer"), "{e}");
        let e = parse_response(json!({"ok": true})).expect_err("no status");
        assert!(e.contains("no \"status\""), "{e}");
        let e = parse_response(json!({"status": "WHATEVER"})).expect_err("unknown");
        assert!(e.contains("WHATEVER"), "{e}");
        let e = parse_response(json!([1])).expect_err("not an object");
        assert!(e.contains("not a JSON object"), "{e}");
        assert!(matches!(
            parse_response(json!({"status": "AUTO_YIELD_EXECUTION", "location": "x"})),
            Ok(RunJobResponse::AutoYieldExecution {})
        ));
        // An array in place of a nested object is refused, not read field by field.
        for answer in [
            json!({"status": "ERROR", "error": ["boom", "Error", "stack"]}),
            json!({"status": "RESUME_WITH_TASK", "task": ["t"]}),
        ] {
            let e = parse_response(answer).expect_err("an array is not an object");
            assert!(e.contains("invalid type: sequence"), "{e}");
        }
    }
}
