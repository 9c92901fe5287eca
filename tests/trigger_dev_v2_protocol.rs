//! The Trigger.dev v2 platform protocol against a fake endpoint written in Rust, on both
//! backends: each `RunJobResponse` status mapped onto Flare's outcomes, and bad answers (wrong
//! shapes, unknown task ids, huge outputs, an endpoint that goes away mid-run) turned into clear
//! run errors with nothing left running. The fake endpoint calls Flare's task API over HTTP as
//! the SDK does. The real SDK is exercised by `tests/trigger_dev_v2.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

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
                    json!({"id": id, "name": id, "version": "1.0.0", "integrations": {},
                           "enabled": true, "startPosition": "latest", "preprocessRuns": false,
                           "event": {"name": format!("v2.{id}"), "title": "e", "source": "trigger.dev", "icon": "x"},
                           "trigger": {"type": "static", "title": "t",
                                       "rule": {"event": format!("v2.{id}"), "source": "trigger.dev", "payload": {}}}})
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

async fn statuses_map_onto_outcomes(db: TestDb) {
    let setup = Setup::start(
        &db,
        vec![
            ("ok", script(|_| async { json!({"status": "SUCCESS", "output": {"a": 1}}) })),
            ("payload", script(|_| async { json!({"status": "INVALID_PAYLOAD", "errors": [{"path": ["n"], "message": "Expected string"}]}) })),
            ("auth", script(|_| async { json!({"status": "UNRESOLVED_AUTH_ERROR", "issues": {"github": {"id": "github", "error": "no token"}}}) })),
            ("canceled", script(|_| async { json!({"status": "CANCELED", "task": {"id": "t"}}) })),
            (
                "auto-yield",
                script(|ctx| async move {
                    if let Some(t) = ctx.cached("partial") {
                        assert_eq!(t["output"], json!({"half": true}));
                        return json!({"status": "SUCCESS", "output": "resumed"});
                    }
                    if ctx.body["runChunkExecutionLimit"].as_u64().is_none() {
                        return json!({"status": "ERROR", "error": {"message": "no execution limit sent"}});
                    }
                    let (_, task) = ctx.task(json!({"idempotencyKey": "partial", "name": "partial"})).await;
                    json!({"status": "AUTO_YIELD_EXECUTION_WITH_COMPLETED_TASK", "id": task["id"], "properties": [],
                           "output": "{\"half\":true}", "data": {"location": "x", "timeRemaining": 1, "timeElapsed": 1}})
                }),
            ),
            (
                "parallel",
                script(|ctx| async move {
                    if ctx.cached("p-wait").is_some() {
                        return json!({"status": "SUCCESS", "output": "parallel"});
                    }
                    let (_, task) = ctx
                        .task(json!({"idempotencyKey": "p-wait", "name": "wait", "noop": true, "delayUntil": in_ms(200)}))
                        .await;
                    json!({"status": "RESUME_WITH_PARALLEL_TASK", "task": task, "childErrors": []})
                }),
            ),
            (
                "yield",
                script(|ctx| async move {
                    if ctx.body["yieldedExecutions"].as_array().is_some_and(|y| y.contains(&json!("k1"))) {
                        json!({"status": "SUCCESS", "output": "yielded"})
                    } else {
                        json!({"status": "YIELD_EXECUTION", "key": "k1"})
                    }
                }),
            ),
            (
                "wait",
                script(|ctx| async move {
                    if ctx.cached("wait-key").is_some_and(|t| t["status"] == "COMPLETED") {
                        return json!({"status": "SUCCESS", "output": "waited"});
                    }
                    let (status, task) = ctx
                        .task(json!({"idempotencyKey": "wait-key", "name": "wait", "noop": true, "delayUntil": in_ms(400), "params": {"seconds": 0.4}}))
                        .await;
                    assert_eq!(status, 200, "{task}");
                    assert_eq!(task["status"], "WAITING", "{task}");
                    json!({"status": "RESUME_WITH_TASK", "task": task})
                }),
            ),
            (
                "retry",
                script(|ctx| async move {
                    let (_, task) = ctx.task(json!({"idempotencyKey": "flaky", "name": "flaky"})).await;
                    if task["attempts"] == 1 {
                        return json!({"status": "RETRY_WITH_TASK", "task": task, "error": {"message": "try later"}, "retryAt": in_ms(300)});
                    }
                    assert_eq!(task["status"], "RUNNING", "{task}");
                    let id = task["id"].as_str().unwrap();
                    let (status, done) = ctx.post(&format!("/tasks/{id}/complete"), json!({"output": "{\"ok\":true}"})).await;
                    assert_eq!(status, 200, "{done}");
                    json!({"status": "SUCCESS", "output": {"attempts": task["attempts"]}})
                }),
            ),
        ],
    )
    .await;

    let ok = setup.send("ok").await;
    let run = setup.finished(&ok).await;
    assert_eq!(
        (run["status"].clone(), run["output"].clone()),
        (json!("succeeded"), json!({"a": 1}))
    );
    let body = &setup.calls_of("ok")[0];
    assert_eq!(body["event"]["payload"], json!({"n": 1}));
    assert_eq!(body["run"]["isTest"], false);

    for (job, says) in [
        ("payload", "invalid payload"),
        ("auth", "unresolved integration auth"),
        ("canceled", "CANCELED"),
    ] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(run["attempt"], 1, "{job} fails without retry: {run}");
        assert!(
            run["error"].as_str().unwrap().contains(says),
            "{job}: {run}"
        );
    }

    let yielded = setup.send("yield").await;
    let run = setup.finished(&yielded).await;
    assert_eq!(run["output"], "yielded", "{run}");
    assert_eq!(run["attempt"], 1);
    assert_eq!(setup.calls_of("yield").len(), 2, "executed again at once");

    for (job, output) in [("auto-yield", "resumed"), ("parallel", "parallel")] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "succeeded", "{job}: {run}");
        assert_eq!(run["output"], output, "{job}: {run}");
        assert_eq!(run["attempt"], 1, "{job}: {run}");
    }

    // The SDK's read routes.
    let get = |path: String| {
        let request = setup
            .http
            .get(format!("{}{path}", setup.flare))
            .bearer_auth(KEY);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let run_id = setup.run_of(&ok).await["id"].as_str().unwrap().to_string();
    let run = get(format!("/api/v2/runs/{run_id}")).await;
    assert_eq!(
        (run["status"].clone(), run["output"].clone()),
        (json!("SUCCESS"), json!({"a": 1})),
        "{run}"
    );
    let statuses = get(format!("/api/v2/runs/{run_id}/statuses")).await;
    assert_eq!(statuses["run"]["status"], "SUCCESS", "{statuses}");
    let runs = get("/api/v1/jobs/ok/runs".into()).await;
    assert_eq!(runs["runs"][0]["id"], run_id.as_str(), "{runs}");
    let cancelled: Value = setup
        .http
        .post(format!("{}/api/v1/events/{ok}/cancel-runs", setup.flare))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        cancelled["cancelledRunIds"],
        json!([]),
        "a finished run stays: {cancelled}"
    );

    let waited = setup.send("wait").await;
    let waiting = setup
        .until(&waited, |r| {
            r["status"] == "queued" && r["steps"].to_string().contains("wait-key")
        })
        .await;
    assert!(
        waiting["attempts"].as_array().is_none_or(|a| a.len() <= 1),
        "{waiting}"
    );
    let run = setup.finished(&waited).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "waited");
    assert_eq!(run["attempt"], 1, "a wait is not an attempt: {run}");

    let retried = setup.send("retry").await;
    let run = setup.finished(&retried).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        run["output"],
        json!({"attempts": 2}),
        "the task's second attempt: {run}"
    );
    assert_eq!(
        run["attempt"], 1,
        "a task retry is not a run attempt: {run}"
    );
    let steps = run["steps"].to_string();
    assert!(
        steps.contains("flaky") && steps.contains("\"ok\":true"),
        "{steps}"
    );
}

async fn bad_answers_give_clear_run_errors(db: TestDb) {
    let setup = Setup::start(
        &db,
        vec![
            ("shape", script(|_| async { json!({"hello": "world"}) })),
            (
                "unknown-status",
                script(|_| async { json!({"status": "SOMETHING_NEW"}) }),
            ),
            (
                "unknown-task",
                script(|ctx| async move {
                    let (status, answer) = ctx
                        .post("/tasks/task_nope/complete", json!({"output": "1"}))
                        .await;
                    assert_eq!(status, 404, "{answer}");
                    json!({"status": "ERROR", "error": {"message": "Failed to complete task"}})
                }),
            ),
            (
                "resume-unknown",
                script(|_| async {
                    json!({"status": "RESUME_WITH_TASK", "task": {"id": "task_nope"}})
                }),
            ),
            (
                "huge",
                script(|ctx| async move {
                    let (_, task) = ctx
                        .task(json!({"idempotencyKey": "big", "name": "big"}))
                        .await;
                    let output = serde_json::to_string(&"x".repeat(300 * 1024)).unwrap();
                    let id = task["id"].as_str().unwrap();
                    let (status, answer) = ctx
                        .post(
                            &format!("/tasks/{id}/complete"),
                            json!({ "output": output }),
                        )
                        .await;
                    assert_eq!(status, 413, "{answer}");
                    json!({"status": "ERROR", "error": {"message": "Failed to complete task"}})
                }),
            ),
            (
                "gone",
                script(|ctx| async move {
                    let (status, _) = ctx
                        .task(json!({"idempotencyKey": "before-crash", "name": "step"}))
                        .await;
                    assert_eq!(status, 200);
                    panic!("the endpoint goes away mid-run");
                }),
            ),
        ],
    )
    .await;

    // Retryable: each attempt fails with what was wrong, and the run ends failed (default policy:
    // three attempts), so nothing is left running or stuck.
    let mut events = Vec::new();
    for (job, says) in [
        ("shape", "the answer has no \"status\""),
        ("unknown-status", "SOMETHING_NEW"),
        ("gone", "could not reach the endpoint"),
    ] {
        events.push((job, says, setup.send(job).await));
    }
    for (job, says, event) in events {
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(run["attempt"], 3, "{job}: {run}");
        let error = run["error"].as_str().unwrap();
        assert!(error.contains(says), "{job}: {error}");
    }

    for (job, says) in [
        ("unknown-task", "\"task_nope\", which run"),
        (
            "resume-unknown",
            "\"task_nope\", which the run does not have",
        ),
        ("huge", "more than the 262144 Flare keeps"),
    ] {
        let event = setup.send(job).await;
        let run = setup.finished(&event).await;
        assert_eq!(run["status"], "failed", "{job}: {run}");
        assert_eq!(
            run["attempt"], 1,
            "{job}: a bad answer is not retried: {run}"
        );
        assert!(
            run["error"].as_str().unwrap().contains(says),
            "{job}: {run}"
        );
    }

    // Only a run's current execution may write its tasks.
    let answer = setup
        .http
        .post(format!("{}/api/v1/runs/run_not_running/tasks", setup.flare))
        .bearer_auth(KEY)
        .json(&json!({"idempotencyKey": "k", "name": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    let body: Value = answer.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("not executing"),
        "{body}"
    );

    // Flare's own registration takes the protocol too (registering again updates the endpoint).
    let register = |body: Value| {
        setup
            .http
            .post(format!("{}/api/endpoints", setup.flare))
            .json(&body)
            .send()
    };
    let answer = register(json!({"url": setup.fake_url, "secret": KEY, "protocol": "trigger.dev-v2", "clientId": "fake"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["protocol"], "trigger.dev-v2", "{body}");
    let answer =
        register(json!({"url": setup.fake_url, "secret": KEY, "protocol": "trigger.dev-v3"}))
            .await
            .unwrap();
    assert_eq!(answer.status(), 400);
    let answer = register(json!({"url": setup.fake_url, "secret": "tr_dev_wrong", "protocol": "trigger.dev-v2", "clientId": "fake"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 422, "the endpoint refuses another key");

    // A v2 feature Flare does not have answers a JSON error naming it.
    let answer = setup
        .http
        .post(format!("{}/api/v1/jobs/ok/invoke", setup.flare))
        .bearer_auth(KEY)
        .json(&json!({"payload": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 501);
    let body: Value = answer.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("invoking a job"),
        "{body}"
    );
}

backend_tests!(
    statuses_map_onto_outcomes,
    bad_answers_give_clear_run_errors
);
