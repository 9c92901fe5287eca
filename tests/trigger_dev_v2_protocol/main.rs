//! The Trigger.dev v2 platform protocol against a fake endpoint written in Rust, on both
//! backends. `statuses`: each `RunJobResponse` status mapped onto Flare's outcomes, and bad
//! answers (wrong shapes, unknown task ids, huge outputs, an endpoint that goes away mid-run)
//! turned into clear run errors with nothing left running. `waits`: callback tasks resumed by a
//! `POST`, by an event an ephemeral dispatcher names (one sent before the run waits included),
//! by an invoked run's end, or errored at their deadline; invoking a job and cancelling a job's
//! runs; what Flare refuses there, naming the field. The fake endpoint calls Flare's task API
//! over HTTP as the SDK does; its harness is here. The real SDK is exercised by
//! `tests/trigger_dev_v2`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod statuses;
mod waits;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use flare::config::RawServe;
use serde_json::{json, Value};
use support::server::{settings, Server};
use support::TestDb;

const KEY: &str = "tr_dev_protocolTestKey";

type Reply = Pin<Box<dyn Future<Output = Value> + Send>>;
type Script = Arc<dyn Fn(Ctx) -> Reply + Send + Sync>;

/// What a job's script gets: the `RunJobBody`, Flare's URL and a client.
#[derive(Clone)]
struct Ctx {
    body: Value,
    flare: String,
    http: reqwest::Client,
}

impl Ctx {
    fn run_id(&self) -> String {
        self.body["run"]["id"].as_str().unwrap().to_string()
    }

    /// `POST /api/v1/runs/{run}/tasks` as the SDK sends it (lazily loaded cached tasks).
    async fn task(&self, body: Value) -> (u16, Value) {
        let answer = self
            .http
            .post(format!(
                "{}/api/v1/runs/{}/tasks",
                self.flare,
                self.run_id()
            ))
            .bearer_auth(KEY)
            .header("Trigger-Version", "2023-09-29")
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let versioned = answer.headers().get("trigger-version").is_some();
        let json: Value = answer.json().await.unwrap_or_default();
        (
            status,
            if versioned {
                json["task"].clone()
            } else {
                json
            },
        )
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let answer = self
            .http
            .post(format!(
                "{}/api/v1/runs/{}{path}",
                self.flare,
                self.run_id()
            ))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or_default())
    }

    /// `POST {path}` on Flare's API with the key, as the SDK's client calls it.
    async fn api(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!("{}{path}", self.flare))
            .bearer_auth(KEY)
            .json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or_default())
    }

    fn cached(&self, key: &str) -> Option<Value> {
        self.body["tasks"]
            .as_array()?
            .iter()
            .find(|t| t["idempotencyKey"] == key)
            .cloned()
    }
}

#[derive(Clone)]
struct Fake {
    scripts: Arc<HashMap<&'static str, Script>>,
    calls: Arc<Mutex<Vec<Value>>>,
    flare: Arc<Mutex<String>>,
    http: reqwest::Client,
}

async fn endpoint(State(fake): State<Fake>, headers: HeaderMap, body: String) -> Response {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    if header("x-trigger-api-key") != KEY {
        return (axum::http::StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    match header("x-trigger-action") {
        "PING" => Json(json!({"ok": header("x-trigger-endpoint-id") == "fake"})).into_response(),
        "INDEX_ENDPOINT" => {
            let jobs: Vec<Value> = fake
                .scripts
                .keys()
                .map(|id| {
                    // `invoked-…` jobs have an invokeTrigger, the others an eventTrigger.
                    let trigger = if id.starts_with("invoked-") {
                        json!({"type": "invoke"})
                    } else {
                        json!({"type": "static", "title": "t",
                               "rule": {"event": format!("v2.{id}"), "source": "trigger.dev", "payload": {}}})
                    };
                    json!({"id": id, "name": id, "version": "1.0.0", "integrations": {},
                           "enabled": true, "startPosition": "latest", "preprocessRuns": false,
                           "event": {"name": format!("v2.{id}"), "title": "e", "source": "trigger.dev", "icon": "x"},
                           "trigger": trigger})
                })
                .chain([json!({"id": "nightly", "name": "n", "version": "1.0.0",
                               "trigger": {"type": "scheduled", "schedule": {"type": "cron", "options": {"cron": "0 0 * * *"}}}}),
                        json!({"id": "on-demand", "name": "d", "version": "1.0.0",
                               "trigger": {"type": "dynamic", "id": "github-issues"}})])
                .collect();
            Json(json!({"jobs": jobs, "sources": [], "webhooks": []})).into_response()
        }
        "EXECUTE_JOB" => {
            let body: Value = serde_json::from_str(&body).unwrap();
            fake.calls.lock().unwrap().push(body.clone());
            let job = body["job"]["id"].as_str().unwrap().to_string();
            let script = fake.scripts[job.as_str()].clone();
            let ctx = Ctx {
                body,
                flare: fake.flare.lock().unwrap().clone(),
                http: fake.http.clone(),
            };
            Json(script(ctx).await).into_response()
        }
        other => Json(json!({"message": format!("unknown action {other}")})).into_response(),
    }
}

fn script<F, Fut>(f: F) -> Script
where
    F: Fn(Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Value> + Send + 'static,
{
    Arc::new(move |ctx| Box::pin(f(ctx)))
}

struct Setup {
    flare: String,
    fake_url: String,
    http: reqwest::Client,
    fake: Fake,
    _server: Server,
}

impl Setup {
    async fn start(db: &TestDb, scripts: Vec<(&'static str, Script)>) -> Setup {
        let fake = Fake {
            scripts: Arc::new(scripts.into_iter().collect()),
            calls: Arc::default(),
            flare: Arc::default(),
            http: reqwest::Client::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake_url = format!("http://{}/api/trigger", listener.local_addr().unwrap());
        let router = axum::Router::new()
            .route("/api/trigger", axum::routing::post(endpoint))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });

        let config = RawServe {
            concurrency: 8,
            demo: false,
            ..settings(&db.url)
        }
        .validate()
        .expect("config");
        let server = Server::start(config).await;
        let flare = server.url.clone();
        *fake.flare.lock().unwrap() = flare.clone();
        let http = reqwest::Client::new();
        let setup = Setup {
            flare,
            fake_url: fake_url.clone(),
            http,
            fake,
            _server: server,
        };
        let registered = support::wait_for("the registration", || async {
            let answer = setup
                .http
                .post(format!("{}/api/v1/endpoints", setup.flare))
                .bearer_auth(KEY)
                .json(&json!({"url": fake_url, "name": "fake"}))
                .send()
                .await
                .ok()?;
            answer.status().is_success().then_some(())?;
            answer.json::<Value>().await.ok()
        })
        .await;
        assert_eq!(registered["protocol"], "trigger.dev-v2", "{registered}");
        let skipped = registered["skippedJobs"].to_string();
        assert!(
            !skipped.contains("nightly"),
            "a cronTrigger job is scheduled, not skipped: {registered}"
        );
        assert!(
            skipped.contains("on-demand") && skipped.contains("dynamic"),
            "a dynamic trigger's job is reported as not run: {registered}"
        );
        let jobs: Value = setup
            .http
            .get(format!("{}/api/jobs", setup.flare))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let nightly = jobs["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["id"] == "nightly"))
            .unwrap_or_else(|| panic!("the cron job is a Flare job: {jobs}"));
        assert_eq!(nightly["schedule"]["cron"], "0 0 * * *", "{nightly}");
        assert!(nightly["schedule"]["nextRuns"][0].is_string(), "{nightly}");
        let page = setup
            .http
            .get(format!("{}/endpoints", setup.flare))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            page.contains("Not run by Flare")
                && page.contains("on-demand")
                && page.contains("Trigger.dev v2"),
            "the endpoints page says which jobs are not run and why"
        );
        setup
    }

    async fn send(&self, job: &str) -> String {
        let answer: Value = self
            .http
            .post(format!("{}/trigger", self.flare))
            .json(&json!({"event": format!("v2.{job}"), "payload": {"n": 1}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["result"]["id"].as_str().unwrap().to_string()
    }

    async fn run_of(&self, event: &str) -> Value {
        support::wait_for("the event's run", || async {
            let e: Value = self
                .http
                .get(format!("{}/api/events/{event}", self.flare))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let id = e["runs"][0]["id"].as_str()?.to_string();
            self.http
                .get(format!("{}/api/runs/{id}", self.flare))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()
        })
        .await
    }

    /// Waits until the run of `event` satisfies `done`.
    async fn until(&self, event: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let run = self.run_of(event).await;
            if done(&run) {
                return run;
            }
            assert!(tokio::time::Instant::now() < deadline, "stuck: {run}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finished(&self, event: &str) -> Value {
        self.until(event, |r| {
            matches!(
                r["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            )
        })
        .await
    }

    fn calls_of(&self, job: &str) -> Vec<Value> {
        let calls = self.fake.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c["job"]["id"] == job)
            .cloned()
            .collect()
    }
}

fn in_ms(ms: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::milliseconds(ms)).to_rfc3339()
}
