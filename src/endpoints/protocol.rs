//! The endpoint protocol's messages (version 1, written down in `docs/endpoints.md`): what Flare
//! sends (`index`, `run`) and how it reads the answers. Every answer is checked strictly: an
//! unknown field, a missing one or a value out of bounds is an error that names it.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::client::SendEvent;
use crate::job::{event_trigger, schedule_trigger, Job, Schedule};
use crate::model::Level;
use crate::model::RetryPolicy;
use crate::model::{CancelOn, ConcurrencyLimit, DelaySpec, RateLimitSpec, ThrottleSpec};

/// Largest `timeoutMs` an index may give: one day.
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Largest `retry.maxAttempts`.
pub const MAX_ATTEMPTS: u32 = 1_000;
/// Largest retry delay: 30 days.
pub const MAX_DELAY_MS: u64 = 30 * 86_400_000;
/// Most jobs one endpoint may serve.
pub const MAX_JOBS: usize = 1_000;
/// Most log lines kept from one answer; the rest are dropped with a note.
pub const MAX_LOG_LINES: usize = 1_000;
/// Most events one answer may send.
pub const MAX_EVENTS: usize = 100;
/// The protocol version with durable steps (`docs/endpoints.md`, "Protocol version 2").
pub const PROTOCOL_STEPS: u32 = 2;

/// The body of an `index` request.
pub fn index_request() -> Value {
    json!({ "action": "index" })
}

/// The body of a `run` request.
pub struct RunRequest<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// Attempt, from 1.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Job id.
    pub job_id: &'a str,
    /// Job version.
    pub job_version: &'a str,
    /// Event id.
    pub event_id: &'a str,
    /// Event name.
    pub event_name: &'a str,
    /// Event payload.
    pub payload: Value,
}

impl RunRequest<'_> {
    /// The JSON body.
    pub fn to_json(self) -> Value {
        json!({
            "action": "run",
            "run": { "id": self.run_id, "attempt": self.attempt, "maxAttempts": self.max_attempts },
            "job": { "id": self.job_id, "version": self.job_version },
            "event": { "id": self.event_id, "name": self.event_name, "payload": self.payload },
        })
    }
}

/// One job of an index, as the endpoint declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobDef {
    /// Job id (slug).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Semver version.
    pub version: String,
    /// What starts it.
    pub trigger: TriggerDef,
    /// Retry policy; Flare's defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryDef>,
    /// Per-attempt timeout, ms (default 300,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Concurrency limits across every process sharing the database: a number (the whole
    /// job), `{"limit", "key"}` (per value of a CEL key over the event), `{"limit", "group"}`
    /// (shared by the jobs naming the group), or a list of at most two of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Value>,
    /// Rate limit: `{"limit", "periodMs", "key"?}`, runs created per period per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Value>,
    /// Throttle: `{"limit", "periodMs", "key"?, "burst"?}`, run starts per period per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Value>,
    /// A run not started this long after it became due is cancelled, ms (1 s to 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_ms: Option<u64>,
    /// Debounce: `{"periodMs", "key"?, "timeoutMs"?}`, one run per burst of events per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<Value>,
    /// Priority: `{"run": "<CEL>"}`, seconds (−600 to 600) earlier than due its runs are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Value>,
    /// Events that cancel its runs: `[{"event", "match"?, "if"?, "timeoutMs"?}]` (see
    /// [`crate::CancelOn`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_on: Option<Value>,
    /// The protocol version its runs speak: 2 with durable steps ([`super::stepped`]), 1 (or
    /// absent) without. Set from the index answer's top-level `protocol`, kept with each job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
}

/// A job's trigger: an event (with an optional payload filter) or a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerDef {
    /// Event name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Payload filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    /// A schedule, in place of an event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleDef>,
}

/// A scheduled trigger: `{"cron": "0 9 * * 1-5", "timezone": "Europe/Paris"}` or
/// `{"intervalSeconds": 300}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScheduleDef {
    /// A cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// An interval, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<u64>,
}

impl ScheduleDef {
    /// The schedule, or what is wrong with it.
    pub fn to_schedule(&self) -> Result<Schedule, String> {
        match (&self.cron, self.interval_seconds) {
            (Some(expr), None) => {
                Schedule::cron(expr, self.timezone.as_deref()).map_err(|e| e.to_string())
            }
            (None, Some(secs)) if self.timezone.is_none() => {
                Schedule::interval(Duration::from_secs(secs)).map_err(|e| e.to_string())
            }
            (None, Some(_)) => Err("trigger.schedule: \"timezone\" goes with \"cron\"".into()),
            _ => Err(
                "trigger.schedule needs either \"cron\" (with an optional \"timezone\") or \"intervalSeconds\""
                    .into(),
            ),
        }
    }
}

/// A job's retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetryDef {
    /// Attempts in all (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// First delay, ms (default 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_delay_ms: Option<u64>,
    /// Largest delay, ms (default 3,600,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// Growth per attempt (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
}

impl JobDef {
    /// The job this definition describes, without its body (the caller adds the HTTP call), or
    /// what is wrong with it.
    pub fn to_job(&self) -> Result<Job, String> {
        let mut retry = RetryPolicy::default();
        if let Some(r) = &self.retry {
            if let Some(n) = r.max_attempts {
                if n > MAX_ATTEMPTS {
                    return Err(format!("retry.maxAttempts is at most {MAX_ATTEMPTS}"));
                }
                retry = retry.max_attempts(n);
            }
            let min = r.min_delay_ms.unwrap_or(retry.min_delay.as_millis() as u64);
            let max = r.max_delay_ms.unwrap_or(retry.max_delay.as_millis() as u64);
            if min > MAX_DELAY_MS || max > MAX_DELAY_MS {
                return Err(format!(
                    "retry delays are at most {MAX_DELAY_MS} ms (30 days)"
                ));
            }
            retry = retry.delays(Duration::from_millis(min), Duration::from_millis(max));
            if let Some(f) = r.factor {
                retry.factor = f;
            }
        }
        let timeout = self.timeout_ms.unwrap_or(300_000);
        if timeout == 0 || timeout > MAX_TIMEOUT_MS {
            return Err(format!(
                "timeoutMs must be from 1 to {MAX_TIMEOUT_MS} (one day)"
            ));
        }
        let mut trigger = match (&self.trigger.event, &self.trigger.schedule) {
            (Some(event), None) => event_trigger(event.clone()),
            (None, Some(schedule)) => schedule_trigger(schedule.to_schedule()?),
            _ => return Err("the trigger needs either \"event\" or \"schedule\", not both".into()),
        };
        if let Some(filter) = &self.trigger.filter {
            trigger = trigger.filter(filter.clone());
        }
        let mut job = Job::new(&self.id, &self.name, &self.version)
            .trigger(trigger)
            .retry(retry)
            .timeout(Duration::from_millis(timeout));
        if let Some(v) = &self.rate_limit {
            let r = RateLimitSpec::from_json(v, "rateLimit")?;
            job = job.rate_limit(
                r.limit,
                Duration::from_millis(r.period_ms),
                r.key.as_deref(),
            );
        }
        if let Some(ms) = self.start_timeout_ms {
            job = job.start_timeout(Duration::from_millis(ms));
        }
        if let Some(v) = &self.debounce {
            job = job.debounce(crate::model::Debounce::from_json(v, "debounce")?);
        }
        if let Some(v) = &self.priority {
            job = job.priority(&crate::model::Priority::text_from_json(v, "priority")?);
        }
        if let Some(v) = &self.throttle {
            let t = ThrottleSpec::from_json(v, "throttle")?;
            job = job.throttle(
                t.limit,
                Duration::from_millis(t.period_ms),
                t.key.as_deref(),
                t.burst,
            );
        }
        if let Some(v) = &self.concurrency {
            for limit in ConcurrencyLimit::list_from_json(v, "concurrency")? {
                job = job.concurrency_limit(limit);
            }
        }
        if let Some(v) = &self.cancel_on {
            for on in CancelOn::list_from_json(v, "cancelOn")? {
                job = job.cancel_on(on);
            }
        }
        Ok(job)
    }
}

/// Reads an `index` answer into its job definitions: the whole index or the first thing wrong
/// with it. Each job is checked as Flare checks a job defined in Rust (id, version, event name,
/// filter operators, retry bounds); ids must be unique.
pub fn parse_index(answer: Value) -> Result<Vec<JobDef>, String> {
    let Value::Object(mut fields) = answer else {
        return Err("the index answer must be a JSON object {\"jobs\": [...]}".into());
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "jobs" | "protocol"))
    {
        return Err(format!(
            "unknown field {key:?} in the index answer (expected \"jobs\" and optionally \"protocol\")"
        ));
    }
    let version = match fields.remove("protocol") {
        None => None,
        Some(v) if v == json!(1) => None,
        Some(v) if v == json!(PROTOCOL_STEPS) => Some(PROTOCOL_STEPS),
        Some(v) => {
            return Err(format!(
                "\"protocol\" is {v}: this Flare speaks versions 1 and {PROTOCOL_STEPS}"
            ))
        }
    };
    let Some(Value::Array(jobs)) = fields.remove("jobs") else {
        return Err("the index answer has no \"jobs\" array".into());
    };
    if jobs.len() > MAX_JOBS {
        return Err(format!("an endpoint serves at most {MAX_JOBS} jobs"));
    }
    let mut seen = HashSet::new();
    let mut defs = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.into_iter().enumerate() {
        let name = job
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("jobs[{i}]"), |id| format!("jobs[{i}] ({id:?})"));
        let mut def: JobDef =
            crate::strict_json::from_value(job).map_err(|e| format!("{name}: {e}"))?;
        if version.is_some() {
            def.protocol = version;
        }
        if def.protocol.is_some_and(|v| v != PROTOCOL_STEPS) {
            return Err(format!("{name}: unknown protocol version"));
        }
        def.to_job()
            .and_then(|job| {
                // A body is needed to validate; the real one is added when the job is defined.
                job.run(|_: Value, _| async { Ok(Value::Null) })
                    .validate()
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| format!("{name}: {e}"))?;
        if !seen.insert(def.id.clone()) {
            return Err(format!("{name}: the id {:?} is used twice", def.id));
        }
        defs.push(def);
    }
    Ok(defs)
}

/// A `run` answer.
#[derive(Debug, Default)]
pub struct RunAnswer {
    /// `Ok(output)` or `Err((message, retry))`.
    pub outcome: Option<Result<Value, (String, bool)>>,
    /// Log lines to store with the attempt.
    pub logs: Vec<(Level, String, Option<Value>)>,
    /// Events to send, each with its idempotency key within the run.
    pub events: Vec<(String, SendEvent)>,
}

/// Reads a `run` answer, or what is wrong with it.
pub fn parse_run_answer(answer: Value) -> Result<RunAnswer, String> {
    let Value::Object(fields) = answer else {
        return Err("the answer must be a JSON object with \"output\" or \"error\"".into());
    };
    let mut out = RunAnswer::default();
    let mut output = None;
    let mut error = None;
    let mut retry = true;
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
            "logs" => out.logs = parse_logs(value)?,
            "events" => out.events = parse_events(value)?,
            other => {
                return Err(format!(
                    "unknown field {other:?} in the answer (expected output or error, and optionally retry, logs, events)"
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
        (None, None) => return Err("the answer has neither \"output\" nor \"error\"".into()),
    };
    Ok(out)
}

pub(crate) fn parse_logs(value: Value) -> Result<Vec<(Level, String, Option<Value>)>, String> {
    let Value::Array(lines) = value else {
        return Err("\"logs\" must be an array".into());
    };
    let total = lines.len();
    let mut logs = Vec::with_capacity(total.min(MAX_LOG_LINES + 1));
    for (i, line) in lines.into_iter().enumerate().take(MAX_LOG_LINES) {
        let Value::Object(mut f) = line else {
            return Err(format!(
                "logs[{i}] must be an object {{\"level\", \"message\"}}"
            ));
        };
        if let Some(k) = f
            .keys()
            .find(|k| !matches!(k.as_str(), "level" | "message" | "fields"))
        {
            return Err(format!("logs[{i}]: unknown field {k:?}"));
        }
        let level = match f.remove("level") {
            None => Level::Info,
            Some(Value::String(s)) => Level::parse(&s).ok_or_else(|| {
                format!("logs[{i}]: level {s:?} is not one of debug, info, warn, error")
            })?,
            Some(_) => return Err(format!("logs[{i}]: level must be a string")),
        };
        let message = match f.remove("message") {
            Some(Value::String(s)) => s,
            _ => return Err(format!("logs[{i}]: message must be a string")),
        };
        logs.push((level, message, f.remove("fields")));
    }
    if total > MAX_LOG_LINES {
        logs.push((
            Level::Warn,
            format!(
                "{} more log lines were dropped (at most {MAX_LOG_LINES} per answer)",
                total - MAX_LOG_LINES
            ),
            None,
        ));
    }
    Ok(logs)
}

pub(crate) fn parse_events(value: Value) -> Result<Vec<(String, SendEvent)>, String> {
    let Value::Array(events) = value else {
        return Err("\"events\" must be an array".into());
    };
    if events.len() > MAX_EVENTS {
        return Err(format!("an answer may send at most {MAX_EVENTS} events"));
    }
    let mut keys = HashSet::new();
    let mut out = Vec::with_capacity(events.len());
    for (i, event) in events.into_iter().enumerate() {
        let Value::Object(f) = event else {
            return Err(format!(
                "events[{i}] must be an object {{\"name\", \"payload\"}}"
            ));
        };
        let (key, send) = parse_event(i, f).map_err(|e| format!("events[{i}]: {e}"))?;
        if !keys.insert(key.clone()) {
            return Err(format!("events[{i}]: the key {key:?} is used twice"));
        }
        out.push((key, send));
    }
    Ok(out)
}

pub(crate) fn parse_event(
    i: usize,
    mut f: Map<String, Value>,
) -> Result<(String, SendEvent), String> {
    if let Some(k) = f.keys().find(|k| {
        !matches!(
            k.as_str(),
            "name" | "payload" | "key" | "delay" | "deliverAt" | "context"
        )
    }) {
        return Err(format!("unknown field {k:?}"));
    }
    let name = match f.remove("name") {
        Some(Value::String(s)) => s,
        _ => return Err("\"name\" must be a string".into()),
    };
    let key = match f.remove("key") {
        None => i.to_string(),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 100 => s,
        Some(_) => return Err("\"key\" must be a string of 1-100 bytes".into()),
    };
    let payload = f.remove("payload").unwrap_or(Value::Null);
    let mut send = SendEvent::new(name, &payload);
    if let Some(delay) = f.remove("delay") {
        let spec: DelaySpec = crate::strict_json::from_value(delay).map_err(|e| e.to_string())?;
        send = send.delay(spec.to_delay()?);
    }
    if let Some(at) = f.remove("deliverAt") {
        let at = at
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .ok_or("\"deliverAt\" must be an RFC 3339 time such as 2030-01-01T09:00:00Z")?;
        send = send.deliver_at(at.with_timezone(&chrono::Utc));
    }
    if let Some(context) = f.remove("context") {
        send = send.context(context);
    }
    Ok((key, send))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str) -> Value {
        json!({"id": id, "name": "A job", "version": "1.0.0", "trigger": {"event": "user.created"}})
    }

    #[test]
    fn an_index_is_read_whole_with_defaults() {
        let defs = parse_index(json!({"jobs": [job("a"), {
            "id": "b", "name": "B", "version": "2.1.0",
            "trigger": {"event": "payment.succeeded", "filter": {"currency": ["usd"], "amount": [{"$gt": 10}]}},
            "retry": {"maxAttempts": 5, "minDelayMs": 10, "maxDelayMs": 1000, "factor": 3},
            "timeoutMs": 2000, "concurrency": 4
        }]}))
        .expect("valid");
        assert_eq!(defs.len(), 2);
        let (spec, _) = defs[1]
            .to_job()
            .expect("job")
            .run(|_: Value, _| async { Ok(Value::Null) })
            .validate()
            .expect("valid");
        assert_eq!(spec.retry.max_attempts, 5);
        assert_eq!(spec.retry.min_delay, Duration::from_millis(10));
        assert_eq!(spec.retry.factor, 3.0);
        assert_eq!(spec.timeout, Duration::from_millis(2000));
        assert_eq!(spec.concurrency.job_limit(), Some(4));
        let keyed = parse_index(json!({"jobs": [{
            "id": "k", "name": "K", "version": "1.0.0", "trigger": {"event": "x.y"},
            "concurrency": [{"limit": 1, "key": "event.payload.customerId"}, {"limit": 10, "group": "openai"}]
        }]}))
        .expect("valid");
        let keyed_spec = keyed[0]
            .to_job()
            .expect("job")
            .run(|_: Value, _| async { Ok(Value::Null) })
            .validate()
            .expect("valid")
            .0;
        assert_eq!(
            keyed_spec.concurrency.to_json(),
            Some(
                json!([{"limit": 1, "key": "event.payload.customerId"}, {"limit": 10, "group": "openai"}])
            )
        );
        assert!(spec.matches(
            "payment.succeeded",
            &json!({"currency": "usd", "amount": 11})
        ));
        assert!(!spec.matches(
            "payment.succeeded",
            &json!({"currency": "usd", "amount": 9})
        ));
        let (a, _) = defs[0]
            .to_job()
            .expect("job")
            .run(|_: Value, _| async { Ok(Value::Null) })
            .validate()
            .expect("valid");
        assert_eq!(a.retry, RetryPolicy::default());
        assert_eq!(a.timeout, Duration::from_secs(300));
    }

    #[test]
    fn the_index_says_which_protocol_version_its_jobs_speak() {
        let defs = parse_index(json!({"protocol": 2, "jobs": [job("a")]})).expect("valid");
        assert_eq!(defs[0].protocol, Some(PROTOCOL_STEPS));
        // Kept with each job, so the stored index reads back the same.
        let stored = serde_json::to_value(&defs).expect("json");
        assert_eq!(parse_index(json!({ "jobs": stored })).expect("valid"), defs);
        let defs = parse_index(json!({"protocol": 1, "jobs": [job("a")]})).expect("valid");
        assert_eq!(defs[0].protocol, None);
        let err = parse_index(json!({"protocol": 3, "jobs": []})).expect_err("refused");
        assert!(err.contains("versions 1 and 2"), "{err}");
    }

    #[test]
    fn a_job_may_be_triggered_by_a_schedule() {
        let defs = parse_index(json!({"jobs": [
            {"id": "daily", "name": "Daily", "version": "1.0.0",
             "trigger": {"schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Paris"}}},
            {"id": "poll", "name": "Poll", "version": "1.0.0",
             "trigger": {"schedule": {"intervalSeconds": 300}}}
        ]}))
        .expect("valid");
        let specs: Vec<_> = defs
            .iter()
            .map(|d| {
                d.to_job()
                    .expect("job")
                    .run(|_: Value, _| async { Ok(Value::Null) })
                    .validate()
                    .expect("valid")
                    .0
            })
            .collect();
        assert_eq!(
            specs[0].schedule,
            Some(Schedule::cron("0 9 * * 1-5", Some("Europe/Paris")).expect("valid"))
        );
        assert_eq!(specs[0].event, "schedule.daily");
        assert_eq!(
            specs[1].schedule,
            Some(Schedule::interval(Duration::from_secs(300)).expect("valid"))
        );
        let bad = |trigger: Value| {
            parse_index(
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": trigger}]}),
            )
            .expect_err("refused")
        };
        assert!(bad(json!({"schedule": {"cron": "nope"}})).contains("invalid cron expression"));
        assert!(
            bad(json!({"schedule": {"cron": "0 9 * * *", "timezone": "Nowhere"}}))
                .contains("unknown time zone")
        );
        assert!(bad(json!({"schedule": {"intervalSeconds": 0}})).contains("at least one second"));
        assert!(bad(json!({"schedule": {}})).contains("either"));
        assert!(
            bad(json!({"event": "a.b", "schedule": {"intervalSeconds": 5}})).contains("not both")
        );
        assert!(bad(json!({})).contains("either"));
        assert!(bad(json!({"schedule": {"every": 5}})).contains("unknown field `every`"));
    }

    #[test]
    fn a_bad_job_refuses_the_whole_index_and_says_which() {
        let cases = [
            (json!({"jobs": [job("a"), job("a")]}), "used twice"),
            (json!({"jobs": [job("Bad Id")]}), "invalid job id"),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0", "trigger": {"event": "x.y"}}]}),
                "invalid version",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y", "filter": {"a": [{"$near": 1}]}}}]}),
                "$near",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "Bad Name"}}]}),
                "event name",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "timeout": 5}]}),
                "unknown field `timeout`",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "timeoutMs": 0}]}),
                "timeoutMs",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "retry": {"maxAttempts": 0}}]}),
                "max_attempts",
            ),
            (json!({"jobs": [{"id": "a"}]}), "missing field"),
            // An array is not read as an object's fields in order, at any depth.
            (
                json!({"jobs": [["a", "A", "1.0.0", {"event": "x.y"}]]}),
                "jobs[0]: invalid type: sequence, expected a JSON object",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": ["x.y"]}]}),
                "invalid type: sequence, expected a JSON object",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"schedule": ["0 9 * * *"]}}]}),
                "invalid type: sequence, expected a JSON object",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "retry": [5]}]}),
                "invalid type: sequence, expected a JSON object",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "concurrency": 0}]}),
                "concurrency.limit",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "concurrency": {"limit": 1, "key": "event.payload.("}}]}),
                "concurrency.key: not a CEL expression",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "concurrency": [{"limit": 1, "group": "g"}, {"limit": 2, "group": "h"}]}]}),
                "two limits of the same shape",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "concurrency": [1, 2, 3]}]}),
                "at most two",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "rateLimit": {"limit": 1, "periodMs": 10}}]}),
                "rateLimit.periodMs",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "throttle": {"limit": 2, "periodMs": 1000, "burst": 3}}]}),
                "throttle.burst",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"},
                    "throttle": {"limit": 2, "periodMs": 1000, "key": "event.name"},
                    "concurrency": {"limit": 1, "key": "event.id"}}]}),
                "throttle.key: must be the concurrency key",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "startTimeoutMs": 10}]}),
                "startTimeoutMs",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "debounce": {"periodMs": 5000, "timeoutMs": 1000}}]}),
                "debounce.timeoutMs",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "priority": {"run": "event.payload.("}}]}),
                "priority.run: not a CEL expression",
            ),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "priority": 5}]}),
                "priority: an object",
            ),
            (json!({"jobs": {}}), "no \"jobs\" array"),
            (json!([]), "JSON object"),
            (json!({"jobs": [], "extra": 1}), "unknown field \"extra\""),
            (
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y"}, "protocol": 7}]}),
                "unknown protocol version",
            ),
        ];
        for (answer, expected) in cases {
            let err = parse_index(answer.clone()).expect_err(&answer.to_string());
            assert!(err.contains(expected), "{answer}: {err}");
        }
        assert_eq!(parse_index(json!({"jobs": []})), Ok(vec![]));
    }

    #[test]
    fn run_answers_are_output_or_error_with_logs_and_events() {
        let a = parse_run_answer(json!({
            "output": {"ok": true},
            "logs": [{"level": "warn", "message": "hi", "fields": {"n": 1}}, {"message": "plain"}],
            "events": [{"name": "file.processed", "payload": {"id": 1}, "key": "done"}, {"name": "a.b", "delay": "1h"}]
        }))
        .expect("valid");
        assert!(matches!(a.outcome, Some(Ok(ref v)) if v == &json!({"ok": true})));
        assert_eq!(a.logs[0].0, Level::Warn);
        assert_eq!(a.logs[1].0, Level::Info);
        assert_eq!(a.events[0].0, "done");
        assert_eq!(a.events[1].0, "1", "position is the default key");
        let null = parse_run_answer(json!({"output": null})).expect("valid");
        assert!(matches!(null.outcome, Some(Ok(Value::Null))));
        let e = parse_run_answer(json!({"error": "boom", "retry": false})).expect("valid");
        assert!(matches!(e.outcome, Some(Err((ref m, false))) if m == "boom"));
        let e = parse_run_answer(json!({"error": "boom"})).expect("valid");
        assert!(matches!(e.outcome, Some(Err((_, true)))));
    }

    #[test]
    fn bad_run_answers_say_what_is_wrong() {
        let cases = [
            (json!([]), "JSON object"),
            (json!({}), "neither"),
            (json!({"output": 1, "error": "x"}), "both"),
            (json!({"error": 5}), "non-empty string"),
            (json!({"output": 1, "extra": 1}), "unknown field \"extra\""),
            (
                json!({"output": 1, "logs": [{"level": "loud", "message": "x"}]}),
                "loud",
            ),
            (
                json!({"output": 1, "events": [{"payload": 1}]}),
                "events[0]: \"name\"",
            ),
            (
                json!({"output": 1, "events": [{"name": "a.b", "key": "k"}, {"name": "a.c", "key": "k"}]}),
                "used twice",
            ),
            (
                json!({"output": 1, "events": [{"name": "a.b", "delay": -1}]}),
                "events[0]",
            ),
            (json!({"output": 1, "retry": "no"}), "retry"),
            (
                json!({"output": 1, "events": [{"name": "a.b", "delay": [1, 2]}]}),
                "events[0]: `delay` must be an object",
            ),
        ];
        for (answer, expected) in cases {
            let err = parse_run_answer(answer.clone()).expect_err(&answer.to_string());
            assert!(err.contains(expected), "{answer}: {err}");
        }
    }

    #[test]
    fn extra_log_lines_are_dropped_with_a_note() {
        let lines: Vec<Value> = (0..MAX_LOG_LINES + 5)
            .map(|i| json!({"message": format!("l{i}")}))
            .collect();
        let a = parse_run_answer(json!({"output": 1, "logs": lines})).expect("valid");
        assert_eq!(a.logs.len(), MAX_LOG_LINES + 1);
        assert!(a.logs[MAX_LOG_LINES].1.contains("5 more"));
    }
}
