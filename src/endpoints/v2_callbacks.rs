//! Trigger.dev v2's callback tasks on Flare's durable waits. A task created with
//! `callback.enabled` gets an unguessable `callbackUrl`, Flare's `POST /callbacks/{token}`,
//! stored with its wait at once (as `io.callback` is, so an early answer is kept); the run waits
//! on it, holding no worker, when the SDK answers `RESUME_WITH_TASK`. What it waits for depends
//! on what the SDK did with the URL before that ([`Resumes`]):
//!
//! - nothing Flare saw (`io.waitForRequest`, or `io.runTask` with `callback.enabled`): a `POST`
//!   of JSON to the URL, which completes the task with that body;
//! - an ephemeral event dispatcher (`io.waitForEvent`: `POST /api/v1/event-dispatchers/ephemeral`
//!   naming the URL): the first event of that name whose payload passes the filter, sent since
//!   the task was created (an event wait, [`EventWait::filtered`]); the task completes with the
//!   event;
//! - an invoke (`invokeAndWaitForCompletion`: `POST /api/v1/jobs/{id}/invoke` with the URL as
//!   `callbackUrl`): the end of that run, a child of this one (`io.invoke`'s wait); the task
//!   completes with the child's `RunNotification`.
//!
//! A callback task not resumed by its deadline (`callback.timeoutInSeconds`, an hour by
//! default) is errored with [`TIMED_OUT`], as Trigger.dev errors it: the SDK throws that from
//! the task, and the job may catch it.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::model::{EventWait, Run, RunStatus, StepKind, WaitedEvent};

/// The error of a callback task whose deadline passed (Trigger.dev's words).
pub const TIMED_OUT: &str = "Remote callback timeout - no requests received";

/// A callback task's deadline when the SDK gives none, in seconds.
const DEFAULT_TIMEOUT_S: f64 = 3600.0;

/// The longest deadline, in seconds (a year, as Trigger.dev allows).
const MAX_TIMEOUT_S: f64 = 365.0 * 86_400.0;

/// The path of Flare's callback route, before the token.
const CALLBACK_PATH: &str = "/callbacks/";

/// A waiting callback task: its token and what resumes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Callback {
    /// The token of its URL.
    pub token: String,
    /// When the task was created, ms.
    pub since: i64,
    /// Its deadline, ms.
    pub until: i64,
    /// What resumes it.
    pub resumes: Resumes,
}

/// What resumes a callback task (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Resumes {
    /// A `POST` to its URL.
    Request,
    /// An event (`io.waitForEvent`).
    Event(EventWait),
    /// The end of this child run (`invokeAndWaitForCompletion`).
    Run(String),
}

impl Callback {
    /// The durable wait the run suspends on.
    pub fn wait(&self) -> EventWait {
        match &self.resumes {
            Resumes::Request => EventWait::callback(&self.token),
            Resumes::Event(wait) => wait.clone(),
            Resumes::Run(child) => EventWait::invoke(child),
        }
    }
}

/// The step kinds a callback task is stored as: [`StepKind::Callback`] until the run waits,
/// then the kind of what it waits for.
pub(super) fn is_callback_kind(kind: StepKind) -> bool {
    matches!(
        kind,
        StepKind::Callback | StepKind::EventWait | StepKind::Invoke
    )
}

/// A task's `callback` option (`{enabled, timeoutInSeconds}`): its deadline in ms when enabled.
pub(super) fn timeout_ms(callback: Option<&Value>) -> Result<Option<i64>, String> {
    let Some(callback) = callback.filter(|c| !c.is_null()) else {
        return Ok(None);
    };
    if callback.get("enabled").and_then(Value::as_bool) != Some(true) {
        return Ok(None);
    }
    let seconds = match callback.get("timeoutInSeconds") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT_S,
        Some(n) => n
            .as_f64()
            .filter(|s| *s > 0.0 && *s <= MAX_TIMEOUT_S)
            .ok_or_else(|| {
                format!("callback.timeoutInSeconds must be a number of seconds above 0, at most {MAX_TIMEOUT_S}: {n}")
            })?,
    };
    // Bounded above, so the cast is exact enough and cannot overflow.
    #[allow(clippy::cast_possible_truncation)]
    Ok(Some((seconds * 1000.0).round() as i64))
}

/// The callback URL of `token` on Flare at `base` (`http://host:port`).
pub(super) fn url(base: &str, token: &str) -> String {
    format!("{}{CALLBACK_PATH}{token}", base.trim_end_matches('/'))
}

/// The token of a callback URL Flare gave (`…/callbacks/<token>`), whatever its host.
pub fn token_of(url: &str) -> Option<&str> {
    let (_, rest) = url.rsplit_once(CALLBACK_PATH)?;
    let token = rest.split(['?', '#', '/']).next().unwrap_or_default();
    (!token.is_empty()).then_some(token)
}

/// How a callback task ended, from its stored step.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ended {
    /// The deadline passed.
    TimedOut,
    /// Completed with this output (the body posted, the event as v2 shows it).
    Output(Value),
    /// The child run `id` ended (`{runId, status, output, error}` as stored): its
    /// `RunNotification` needs the run ([`run_notification`]).
    Run(Value),
}

/// How the callback task stored as a succeeded step of `kind` with `output` ended.
pub(super) fn ended(kind: StepKind, output: Option<&Value>) -> Ended {
    let output = output.unwrap_or(&Value::Null);
    if output.is_null() {
        return Ended::TimedOut;
    }
    match kind {
        StepKind::EventWait => match serde_json::from_value::<WaitedEvent>(output.clone()) {
            Ok(event) => Ended::Output(v2_event(&event)),
            Err(_) => Ended::Output(output.clone()),
        },
        StepKind::Invoke => Ended::Run(output.clone()),
        _ => Ended::Output(output.get("body").cloned().unwrap_or(Value::Null)),
    }
}

/// An event as `io.waitForEvent` returns it (`{id, name, source, payload, timestamp}`).
fn v2_event(event: &WaitedEvent) -> Value {
    json!({
        "id": event.id,
        "name": event.name,
        "source": "trigger.dev",
        "payload": event.payload,
        "timestamp": event.timestamp,
        "context": null,
    })
}

/// Trigger.dev's `RunNotification` of the child run whose end is `outcome` (`{runId, status,
/// output, error}`), with what `run` (the child, when found) adds.
pub(super) fn run_notification(outcome: &Value, run: Option<&Run>) -> Value {
    let status = outcome["status"].as_str().unwrap_or_default();
    let ok = status == RunStatus::Succeeded.as_str();
    let v2_status = if ok {
        "SUCCESS"
    } else if status == RunStatus::Cancelled.as_str() {
        "CANCELED"
    } else {
        "FAILURE"
    };
    let finished = run.and_then(|r| r.finished_at);
    let started = run.and_then(|r| r.started_at);
    let mut notification = json!({
        "id": outcome["runId"],
        "ok": ok,
        "status": v2_status,
        "startedAt": started,
        "updatedAt": finished,
        "completedAt": finished,
        "isTest": false,
        "executionDurationInMs": started.zip(finished).map_or(0, |(s, f)| (f - s).num_milliseconds().max(0)),
        "executionCount": run.map_or(1, |r| r.attempt),
        "job": {
            "id": run.map(|r| r.job_id.as_str()),
            "version": run.map(|r| r.job_version.as_str()),
        },
        "statuses": [],
        "environment": { "id": "flare", "slug": "flare", "type": "PRODUCTION" },
        "organization": { "id": "flare", "title": "Flare", "slug": "flare" },
        "project": { "id": "flare", "name": "Flare", "slug": "flare" },
        "invocation": {
            "id": run.map(|r| r.event_id.as_str()),
            "context": null,
            "timestamp": run.map(|r| r.created_at),
        },
    });
    if let Value::Object(fields) = &mut notification {
        if ok {
            fields.insert("output".into(), outcome["output"].clone());
        } else {
            let message = outcome["error"].as_str().unwrap_or(match v2_status {
                "CANCELED" => "the run was cancelled",
                _ => "the run failed",
            });
            fields.insert("error".into(), json!({ "message": message }));
        }
    }
    notification
}

/// The body of `POST /api/v1/event-dispatchers/ephemeral` (`io.waitForEvent`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dispatcher {
    /// The waiting task's callback URL.
    pub url: String,
    /// The event name (one; the SDK allows a list).
    pub name: Value,
    /// The event's source; only Trigger.dev's own (`trigger.dev`).
    #[serde(default)]
    pub source: Option<String>,
    /// A payload filter.
    #[serde(default)]
    pub filter: Option<Value>,
    /// A filter on the event's context: not supported.
    #[serde(default)]
    pub context_filter: Option<Value>,
    /// An external account: not supported.
    #[serde(default)]
    pub account_id: Option<String>,
    /// The wait's timeout (the task's own deadline applies).
    #[serde(default)]
    pub timeout_in_seconds: Option<Value>,
}

impl Dispatcher {
    /// The wait it asks for, or what Flare cannot do of it (the field named).
    pub fn wait(&self) -> Result<EventWait, String> {
        let name = match &self.name {
            Value::String(name) => name.as_str(),
            Value::Array(names) => match names.as_slice() {
                [Value::String(name)] => name.as_str(),
                _ => return Err("name: Flare waits for one event name".into()),
            },
            _ => return Err("name: give the event name".into()),
        };
        if let Some(source) = self.source.as_deref().filter(|s| *s != "trigger.dev") {
            return Err(format!(
                "source {source:?}: Flare waits only for events sent to it (source \"trigger.dev\")"
            ));
        }
        if self
            .context_filter
            .as_ref()
            .is_some_and(|c| c.as_object().is_none_or(|o| !o.is_empty()))
        {
            return Err(
                "contextFilter: a filter on the event's context is not supported by Flare (filter the payload)"
                    .into(),
            );
        }
        if self.account_id.is_some() {
            return Err("accountId: external accounts are not supported by Flare".into());
        }
        if let Some(t) = &self.timeout_in_seconds {
            t.as_f64()
                .filter(|s| *s > 0.0 && *s <= MAX_TIMEOUT_S)
                .ok_or_else(|| {
                    format!("timeoutInSeconds must be above 0, at most {MAX_TIMEOUT_S}: {t}")
                })?;
        }
        EventWait::filtered(name, self.filter.as_ref())
    }
}

/// The body of `POST /api/v1/jobs/{id}/invoke` (`invokeJob`).
#[derive(Debug, Deserialize)]
pub struct InvokeBody {
    /// The run's payload (`{}` when absent).
    #[serde(default)]
    pub payload: Option<Value>,
    /// The event's context (kept on a run not invoked by a waiting task).
    #[serde(default)]
    pub context: Option<Value>,
    /// Options.
    #[serde(default)]
    pub options: Option<InvokeOptions>,
}

/// `InvokeBody::options`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeOptions {
    /// An external account: not supported.
    #[serde(default)]
    pub account_id: Option<String>,
    /// The waiting task that waits for the run (`invokeAndWaitForCompletion`).
    #[serde(default)]
    pub callback_url: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_back_from_the_urls_flare_gives() {
        let u = url("http://127.0.0.1:3000/", "cb_abc");
        assert_eq!(u, "http://127.0.0.1:3000/callbacks/cb_abc");
        assert_eq!(token_of(&u), Some("cb_abc"));
        assert_eq!(
            token_of("https://flare.example/callbacks/cb_x?a=1"),
            Some("cb_x")
        );
        assert_eq!(token_of("https://flare.example/callbacks/"), None);
        assert_eq!(token_of("https://flare.example/other"), None);
    }

    #[test]
    fn deadlines_default_to_an_hour_and_are_bounded() {
        assert_eq!(timeout_ms(None), Ok(None));
        assert_eq!(timeout_ms(Some(&json!({"enabled": false}))), Ok(None));
        assert_eq!(
            timeout_ms(Some(&json!({"enabled": true}))),
            Ok(Some(3_600_000))
        );
        assert_eq!(
            timeout_ms(Some(&json!({"enabled": true, "timeoutInSeconds": 2.5}))),
            Ok(Some(2_500))
        );
        for bad in [json!(0), json!(-1), json!("60"), json!(1e12)] {
            let e = timeout_ms(Some(&json!({"enabled": true, "timeoutInSeconds": bad})));
            assert!(e.is_err_and(|e| e.contains("timeoutInSeconds")), "{bad}");
        }
    }

    #[test]
    fn dispatchers_become_event_waits_or_say_what_flare_lacks() {
        let d = |body: Value| -> Dispatcher { serde_json::from_value(body).expect("body") };
        let wait =
            d(json!({"url": "u", "name": "invoice.paid", "filter": {"invoiceId": ["in_1"]}}))
                .wait()
                .expect("a wait");
        assert_eq!(wait.match_value, "in_1");
        assert!(d(json!({"url": "u", "name": ["a.b"]})).wait().is_ok());
        for (body, says) in [
            (json!({"url": "u", "name": ["a.b", "c.d"]}), "name"),
            (
                json!({"url": "u", "name": "a.b", "source": "github"}),
                "source",
            ),
            (
                json!({"url": "u", "name": "a.b", "contextFilter": {"k": ["v"]}}),
                "contextFilter",
            ),
            (
                json!({"url": "u", "name": "a.b", "accountId": "acc"}),
                "accountId",
            ),
            (
                json!({"url": "u", "name": "a.b", "filter": {"n": [{"$not": 1}]}}),
                "filter",
            ),
            (
                json!({"url": "u", "name": "a.b", "timeoutInSeconds": 0}),
                "timeoutInSeconds",
            ),
        ] {
            let e = d(body.clone()).wait().expect_err("refused");
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn ended_tasks_read_as_v2_shows_them() {
        assert_eq!(ended(StepKind::Callback, None), Ended::TimedOut);
        assert_eq!(
            ended(StepKind::EventWait, Some(&Value::Null)),
            Ended::TimedOut
        );
        assert_eq!(
            ended(
                StepKind::Callback,
                Some(&json!({"body": {"ok": 1}, "token": "t"}))
            ),
            Ended::Output(json!({"ok": 1}))
        );
        let Ended::Output(event) = ended(
            StepKind::EventWait,
            Some(
                &json!({"id": "e1", "name": "a.b", "payload": {"n": 1}, "timestamp": "2026-01-01T00:00:00Z"}),
            ),
        ) else {
            panic!("an event");
        };
        assert_eq!(
            (event["id"].clone(), event["source"].clone()),
            (json!("e1"), json!("trigger.dev"))
        );
        let outcome = json!({"runId": "r1", "status": "failed", "output": null, "error": "boom"});
        let n = run_notification(&outcome, None);
        assert_eq!(
            (n["ok"].clone(), n["status"].clone()),
            (json!(false), json!("FAILURE"))
        );
        assert_eq!(n["error"]["message"], "boom");
        let outcome =
            json!({"runId": "r1", "status": "succeeded", "output": {"x": 1}, "error": null});
        assert_eq!(run_notification(&outcome, None)["output"], json!({"x": 1}));
    }
}
