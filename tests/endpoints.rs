//! HTTP job endpoints, end to end on every backend: a test application (an axum server in the
//! test) serves jobs at a URL; Flare indexes it, runs its jobs with signed requests and records
//! what the answers say. Covers the protocol's rules (docs/endpoints.md): output, error and
//! retry, logs, chained events sent once, every bad answer as a clear attempt error, bad
//! indexes refused whole, re-index and removal cancelling queued runs, conflicts, and the jobs
//! no live node serves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flare::endpoints::{Error as EndpointError, Registry};
use flare::store::endpoints::EndpointHealth;
use flare::webhooks::svix::{SvixHeaders, SvixVerifier};
use flare::{Client, Clock, ManualClock, RunStatus};
use serde_json::{json, Value};
use support::{http, settled, wait_for, TestDb};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the test application answers to one request: status, extra headers, body.
type Answer = (StatusCode, Vec<(&'static str, String)>, Vec<u8>);
type Behaviour = Arc<dyn Fn(&Value) -> Answer + Send + Sync>;

/// The test application: answers with `behaviour`, after checking Flare's signature; records
/// every request it verified. An answer with the header `x-test-delay-ms` is sent that late.
#[derive(Clone)]
struct App {
    behaviour: Arc<Mutex<Behaviour>>,
    seen: Arc<Mutex<Vec<Value>>>,
    url: String,
    stop: tokio_util::sync::CancellationToken,
}

fn json_answer(v: Value) -> Answer {
    (StatusCode::OK, vec![], v.to_string().into_bytes())
}

async fn handle(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let h = SvixHeaders::from_lookup(|n| headers.get(n).and_then(|v| v.to_str().ok()));
    let verified = h.and_then(|h| {
        SvixVerifier::new(vec![SECRET.into()])?.verify(&h, &body, chrono::Utc::now().timestamp())
    });
    if let Err(e) = verified {
        return (StatusCode::UNAUTHORIZED, e.to_string()).into_response();
    }
    let request: Value = serde_json::from_slice(&body).expect("Flare sends JSON");
    app.seen.lock().unwrap().push(request.clone());
    let behaviour = app.behaviour.lock().unwrap().clone();
    let (status, extra, bytes) = behaviour(&request);
    let mut res = (status, bytes).into_response();
    res.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    for (k, v) in extra {
        if k == "x-test-delay-ms" {
            tokio::time::sleep(Duration::from_millis(v.parse().unwrap())).await;
            continue;
        }
        res.headers_mut().insert(k, v.parse().unwrap());
    }
    res
}

impl App {
    async fn start(behaviour: impl Fn(&Value) -> Answer + Send + Sync + 'static) -> App {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = App {
            behaviour: Arc::new(Mutex::new(Arc::new(behaviour))),
            seen: Arc::default(),
            url: format!("http://{addr}/flare"),
            stop: tokio_util::sync::CancellationToken::new(),
        };
        let router = axum::Router::new()
            .route("/flare", axum::routing::post(handle))
            .with_state(app.clone());
        let stop = app.stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
                .unwrap();
        });
        app
    }

    fn set(&self, behaviour: impl Fn(&Value) -> Answer + Send + Sync + 'static) {
        *self.behaviour.lock().unwrap() = Arc::new(behaviour);
    }

    fn runs_seen(&self) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "run")
            .cloned()
            .collect()
    }

    /// Stops listening and closes its idle connections: the application went away.
    fn stop(&self) {
        self.stop.cancel();
    }
}

fn job(id: &str, event: &str) -> Value {
    json!({"id": id, "name": format!("Job {id}"), "version": "1.0.0", "trigger": {"event": event}})
}

/// An index answer with `jobs`, and `run` answered by `run`.
fn serving(
    jobs: Vec<Value>,
    run: impl Fn(&Value) -> Answer + Send + Sync + 'static,
) -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    move |req: &Value| {
        if req["action"] == "index" {
            json_answer(json!({ "jobs": jobs }))
        } else {
            run(req)
        }
    }
}

async fn registry(db: &TestDb) -> (Client, ManualClock, Arc<Registry>) {
    let (client, clock) = db.client().await;
    let registry = Registry::new(client.clone());
    (client, clock, registry)
}

async fn run_of(client: &Client, event_id: &str, job: &str) -> flare::store::RunDetail {
    let detail = settled(client, event_id).await;
    let run = detail
        .runs
        .iter()
        .find(|r| r.job_id == job)
        .unwrap_or_else(|| panic!("no run of {job}: {:?}", detail.runs));
    client.store().run_detail(&run.id).await.unwrap().unwrap()
}

async fn an_endpoints_jobs_run_like_rust_jobs(db: TestDb) {
    let app = App::start(serving(
        vec![
            job("welcome", "user.created"),
            json!({"id": "vip", "name": "VIP", "version": "2.0.0",
                   "trigger": {"event": "user.created", "filter": {"plan": ["pro"]}}}),
            job("after-welcome", "welcome.sent"),
        ],
        |req| match req["job"]["id"].as_str() {
            Some("welcome") => json_answer(json!({
                "output": {"greeted": req["event"]["payload"]["email"]},
                "logs": [{"level": "info", "message": "welcoming"}, {"level": "warn", "message": "w", "fields": {"n": 1}}],
                "events": [{"name": "welcome.sent", "payload": {"to": req["event"]["payload"]["email"]}, "key": "sent"}]
            })),
            _ => json_answer(json!({"output": null})),
        },
    ))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    let summary = registry
        .add(&app.url, Some(SECRET.into()))
        .await
        .expect("registered");
    assert_eq!(
        summary.jobs,
        ["welcome", "vip", "after-welcome"],
        "in index order"
    );
    assert_eq!(summary.health, EndpointHealth::Ok);

    let sent = client
        .send_event(
            "user.created",
            &json!({"email": "ada@example.com", "plan": "free"}),
        )
        .await
        .unwrap();
    assert_eq!(sent.run_ids.len(), 1, "the filter leaves vip out: {sent:?}");
    let run = run_of(&client, &sent.id, "welcome").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(run.run.output, Some(json!({"greeted": "ada@example.com"})));
    assert_eq!(run.run.job_version, "1.0.0");
    let logs: Vec<&str> = run.logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(logs, ["welcoming", "w"]);
    assert_eq!(run.logs[1].fields, Some(json!({"n": 1})));

    // The chained event has the run as its parent, a key-derived id, and ran its own job.
    let detail = client
        .store()
        .event_detail(&sent.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(detail.children.len(), 1);
    let child = &detail.children[0];
    assert_eq!(child.name, "welcome.sent");
    assert_eq!(child.id, format!("{}-sent", run.run.id));
    assert_eq!(child.parent_run_id.as_deref(), Some(run.run.id.as_str()));
    let after = run_of(&client, &child.id, "after-welcome").await;
    assert_eq!(after.run.status, RunStatus::Succeeded);

    // Broadcast with the filter matching: both jobs; the request carries run, job and event.
    let pro = client
        .send_event(
            "user.created",
            &json!({"email": "b@example.com", "plan": "pro"}),
        )
        .await
        .unwrap();
    assert_eq!(pro.run_ids.len(), 2);
    let vip = run_of(&client, &pro.id, "vip").await;
    assert_eq!(vip.run.job_version, "2.0.0");
    let request = app
        .runs_seen()
        .into_iter()
        .find(|r| r["job"]["id"] == "vip")
        .expect("vip was called");
    assert_eq!(request["run"]["id"], json!(vip.run.id));
    assert_eq!(request["run"]["attempt"], json!(1));
    assert_eq!(request["run"]["maxAttempts"], json!(3));
    assert_eq!(request["job"]["version"], json!("2.0.0"));
    assert_eq!(request["event"]["id"], json!(pro.id));
    assert_eq!(request["event"]["name"], json!("user.created"));
    assert_eq!(request["event"]["payload"]["plan"], json!("pro"));
    client.shutdown().await;
}

async fn an_error_answer_is_retried_and_its_events_are_sent_once(db: TestDb) {
    let calls = Arc::new(Mutex::new(0u32));
    let counter = Arc::clone(&calls);
    let app = App::start(serving(
        vec![json!({"id": "flaky", "name": "Flaky", "version": "1.0.0",
                    "trigger": {"event": "order.placed"},
                    "retry": {"maxAttempts": 3, "minDelayMs": 1000, "maxDelayMs": 1000}})],
        move |req| {
            *counter.lock().unwrap() += 1;
            let events = json!([{"name": "order.charged", "payload": {"n": 1}, "key": "charged"}, {"name": "order.logged"}]);
            if req["run"]["attempt"] == 1 {
                json_answer(json!({"error": "card declined", "events": events}))
            } else {
                json_answer(json!({"output": "charged", "events": events}))
            }
        },
    ))
    .await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("order.placed", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();
    let first = wait_for("the first attempt to fail", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        // Queued again, waiting for its retry (the clock does not move on its own).
        (!d.attempts.is_empty() && d.run.status == RunStatus::Queued).then_some(d)
    })
    .await;
    assert_eq!(first.attempts[0].error.as_deref(), Some("card declined"));
    clock.advance(Duration::from_secs(2));
    client.engine().wake();
    let run = run_of(&client, &sent.id, "flaky").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.attempt, 2);
    assert_eq!(*calls.lock().unwrap(), 2);
    let detail = client
        .store()
        .event_detail(&sent.id)
        .await
        .unwrap()
        .unwrap();
    let mut ids: Vec<&str> = detail.children.iter().map(|e| e.id.as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [format!("{run_id}-1"), format!("{run_id}-charged")],
        "each answered event is sent once although two attempts answered it"
    );
    client.shutdown().await;
}

async fn retry_false_fails_the_run_at_once(db: TestDb) {
    let app = App::start(serving(vec![job("strict", "a.b")], |_| {
        json_answer(json!({"error": "bad input", "retry": false, "logs": [{"level": "error", "message": "refused"}]}))
    }))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.b", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "strict").await;
    assert_eq!(run.run.status, RunStatus::Failed);
    assert_eq!(run.run.attempt, 1, "no retry");
    assert_eq!(run.run.error.as_deref(), Some("bad input"));
    assert_eq!(run.logs[0].message, "refused");
    client.shutdown().await;
}

async fn bad_answers_fail_the_attempt_with_a_clear_error(db: TestDb) {
    let jobs: Vec<Value> = [
        "status", "redirect", "not-json", "too-large", "too-slow", "shape", "bad-event",
    ]
    .iter()
    .map(|id| {
        json!({"id": id, "name": id, "version": "1.0.0", "trigger": {"event": format!("t.{}", id.replace('-', "_"))},
               "retry": {"maxAttempts": 1}, "timeoutMs": 500})
    })
    .collect();
    let app = App::start(serving(jobs, |req| {
        match req["job"]["id"].as_str().unwrap() {
            "status" => (
                StatusCode::INTERNAL_SERVER_ERROR,
                vec![],
                b"database exploded".to_vec(),
            ),
            "redirect" => (
                StatusCode::FOUND,
                vec![("location", "http://elsewhere.test/".into())],
                vec![],
            ),
            "not-json" => (StatusCode::OK, vec![], b"<html>hello</html>".to_vec()),
            "too-large" => json_answer(json!({"output": "x".repeat(2 * 1024 * 1024)})),
            "too-slow" => (
                StatusCode::OK,
                vec![("x-test-delay-ms", "1500".into())],
                b"{\"output\": 1}".to_vec(),
            ),
            "shape" => json_answer(json!({"result": 1})),
            _ => json_answer(json!({"output": 1, "events": [{"name": "Not A Name"}]})),
        }
    }))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let expected = [
        ("status", "HTTP 500: database exploded"),
        ("redirect", "does not follow redirects"),
        ("not-json", "not JSON"),
        ("too-large", "larger than 1048576 bytes"),
        ("too-slow", "did not answer within"),
        ("shape", "unknown field \"result\""),
        ("bad-event", "could not send the answer's events"),
    ];
    for (id, text) in expected {
        let sent = client
            .send_event(&format!("t.{}", id.replace('-', "_")), &json!({}))
            .await
            .unwrap();
        let run = run_of(&client, &sent.id, id).await;
        assert_eq!(run.run.status, RunStatus::Failed, "{id}");
        let error = run.run.error.unwrap_or_default();
        assert!(error.contains(text), "{id}: {error}");
    }
    // The endpoint's own failures are recorded on it (not the job's answered errors).
    let summary = wait_for("the failures to be reported", || async {
        let s = registry.list().await.unwrap().remove(0);
        (s.recent_errors.len() >= 6).then_some(s)
    })
    .await;
    assert!(summary.last_error_at.is_some());
    assert!(
        summary.recent_errors[0].message.contains("attempt 1"),
        "{:?}",
        summary.recent_errors
    );

    // An application that went away: refused connections fail the attempt.
    app.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let sent = client.send_event("t.status", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "status").await;
    assert_eq!(run.run.status, RunStatus::Failed);
    assert!(
        run.run
            .error
            .as_deref()
            .unwrap_or("")
            .contains("could not reach the endpoint"),
        "{:?}",
        run.run.error
    );
    client.shutdown().await;
}

async fn a_bad_index_is_refused_whole_and_stores_nothing(db: TestDb) {
    let cases: Vec<(Answer, &str)> = vec![
        (
            json_answer(json!({"jobs": [job("a", "x.y"), job("a", "x.z")]})),
            "used twice",
        ),
        (
            json_answer(json!({"jobs": [job("Bad", "x.y")]})),
            "invalid job id",
        ),
        (
            json_answer(
                json!({"jobs": [{"id": "a", "name": "A", "version": "v1", "trigger": {"event": "x.y"}}]}),
            ),
            "invalid version",
        ),
        (
            json_answer(
                json!({"jobs": [{"id": "a", "name": "A", "version": "1.0.0", "trigger": {"event": "x.y", "filter": {"n": [{"$near": 1}]}}}]}),
            ),
            "$near",
        ),
        ((StatusCode::OK, vec![], b"nope".to_vec()), "not JSON"),
        (
            (
                StatusCode::MOVED_PERMANENTLY,
                vec![("location", "https://x.test/".into())],
                vec![],
            ),
            "redirect",
        ),
        (
            (StatusCode::NOT_FOUND, vec![], b"no such page".to_vec()),
            "HTTP 404",
        ),
    ];
    let app = App::start(|_| json_answer(json!({}))).await;
    let (client, _clock, registry) = registry(&db).await;
    for (answer, text) in cases {
        let answer = Arc::new(answer);
        let a = Arc::clone(&answer);
        app.set(move |_| (*a).clone());
        let err = registry
            .add(&app.url, Some(SECRET.into()))
            .await
            .expect_err(text);
        assert!(matches!(err, EndpointError::Index { .. }), "{err}");
        assert!(err.to_string().contains(text), "{text}: {err}");
        assert!(client.store().endpoints_load().await.unwrap().is_empty());
        assert!(client
            .store()
            .jobs_list(chrono::Utc::now())
            .await
            .unwrap()
            .is_empty());
    }
    // Nothing listens: refused.
    let err = registry
        .add("http://127.0.0.1:9/flare", Some(SECRET.into()))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("could not reach"), "{err}");
    // Bad URL and secret are refused before any call.
    assert!(matches!(
        registry.add("ftp://x/", None).await,
        Err(EndpointError::Url { .. })
    ));
    assert!(matches!(
        registry.add(&app.url, Some("whsec_!!".into())).await,
        Err(EndpointError::Secret(_))
    ));
    let err = registry.add(&app.url, None).await.expect_err("no secret");
    assert!(
        err.to_string().contains("for example a new one: whsec_"),
        "{err}"
    );
    // A wrong secret: the application refuses Flare's signature, and says so.
    app.set(serving(vec![job("a", "x.y")], |_| {
        json_answer(json!({"output": 1}))
    }));
    let err = registry
        .add(&app.url, Some("whsec_c2VjcmV0LXRoYXQtaXMtd3Jvbmc=".into()))
        .await
        .expect_err("wrong secret");
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert!(client.store().endpoints_load().await.unwrap().is_empty());
    client.shutdown().await;
}

async fn reindex_removes_vanished_jobs_and_cancels_their_queued_runs(db: TestDb) {
    let app = App::start(serving(
        vec![
            job("keep", "k.k"),
            json!({"id": "drop", "name": "Drop", "version": "1.0.0", "trigger": {"event": "d.d"},
                   "retry": {"maxAttempts": 3, "minDelayMs": 3600000, "maxDelayMs": 3600000}}),
        ],
        |req| match req["job"]["id"].as_str() {
            Some("drop") => json_answer(json!({"error": "not yet"})),
            _ => json_answer(json!({"output": "ok"})),
        },
    ))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    let summary = registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("d.d", &json!({})).await.unwrap();
    let run_id = sent.run_ids[0].clone();
    wait_for("the first attempt to fail and wait an hour", || async {
        let d = client.store().run_detail(&run_id).await.unwrap()?;
        (!d.attempts.is_empty() && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;

    // The new index drops "drop" and changes "keep".
    app.set(serving(
        vec![
            json!({"id": "keep", "name": "Keep", "version": "1.1.0", "trigger": {"event": "k.k"}}),
        ],
        |_| json_answer(json!({"output": "v2"})),
    ));
    let (after, applied) = registry.reindex(&summary.id).await.unwrap();
    assert_eq!(after.jobs, ["keep"]);
    assert_eq!(applied.removed, ["drop"]);
    assert_eq!(applied.cancelled_runs, 1);
    let run = client.store().run_detail(&run_id).await.unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Cancelled);
    assert!(
        run.run
            .error
            .as_deref()
            .unwrap_or("")
            .contains("was removed from the endpoint"),
        "{:?}",
        run.run.error
    );
    let again = client.send_event("d.d", &json!({})).await.unwrap();
    assert!(
        again.run_ids.is_empty(),
        "a removed job is no longer triggered"
    );
    let kept = client.send_event("k.k", &json!({})).await.unwrap();
    let run = run_of(&client, &kept.id, "keep").await;
    assert_eq!(run.run.job_version, "1.1.0");
    assert_eq!(run.run.output, Some(json!("v2")));

    // A failed re-index keeps the index and is recorded on the endpoint.
    app.set(|_| (StatusCode::BAD_GATEWAY, vec![], b"deploying".to_vec()));
    let err = registry.reindex(&summary.id).await.expect_err("502");
    assert!(err.to_string().contains("HTTP 502"), "{err}");
    let failing = registry.get(&summary.id).await.unwrap();
    assert_eq!(failing.jobs, ["keep"]);
    assert_eq!(failing.health, EndpointHealth::Failing);
    assert!(failing.recent_errors[0].message.contains("deploying"));
    let still = client.send_event("k.k", &json!({})).await.unwrap();
    assert_eq!(still.run_ids.len(), 1);

    // Removing the endpoint stops its jobs.
    app.set(serving(vec![job("keep", "k.k")], |_| {
        json_answer(json!({"output": 1}))
    }));
    let removed = registry.remove(&summary.id).await.unwrap();
    assert_eq!(removed.removed, ["keep"]);
    assert!(client
        .send_event("k.k", &json!({}))
        .await
        .unwrap()
        .run_ids
        .is_empty());
    assert!(registry.list().await.unwrap().is_empty());
    assert!(matches!(
        registry.reindex(&summary.id).await,
        Err(EndpointError::Store(flare::store::Error::NotFound { .. }))
    ));
    client.shutdown().await;
}

/// Defines a job in `client`'s own code and says so at once (a node beat).
async fn define_in_code(client: &Client, id: &str, event: &str) {
    client
        .register_job(
            flare::Job::new(id, id, "1.0.0")
                .trigger(flare::event_trigger(event))
                .run(|_: Value, _| async { Ok(json!(1)) }),
        )
        .await
        .unwrap();
    client.engine().beat().await.unwrap();
}

async fn job_ids_are_one_namespace(db: TestDb) {
    let one = App::start(serving(vec![job("shared", "s.s")], |_| {
        json_answer(json!({"output": 1}))
    }))
    .await;
    let two = App::start(serving(vec![job("shared", "s.s")], |_| {
        json_answer(json!({"output": 2}))
    }))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&one.url, Some(SECRET.into())).await.unwrap();
    let err = registry
        .add(&two.url, Some(SECRET.into()))
        .await
        .expect_err("conflict");
    assert!(
        err.to_string().contains("already served by the endpoint"),
        "{err}"
    );
    assert_eq!(
        registry.list().await.unwrap().len(),
        1,
        "nothing of the second was stored"
    );
    let err = registry
        .add(&one.url, Some(SECRET.into()))
        .await
        .expect_err("twice");
    assert!(err.to_string().contains("registered already"), "{err}");

    // A job a live process defines in Rust cannot be taken by an endpoint.
    define_in_code(&client, "rusty", "r.r").await;
    let three = App::start(serving(vec![job("rusty", "r.r")], |_| {
        json_answer(json!({"output": 3}))
    }))
    .await;
    let err = registry
        .add(&three.url, Some(SECRET.into()))
        .await
        .expect_err("rust job");
    assert!(err.to_string().contains("defined in the code"), "{err}");
    client.shutdown().await;
}

async fn a_job_no_live_node_serves_is_flagged(db: TestDb) {
    let app = App::start(serving(vec![job("remote", "r.r")], |_| {
        json_answer(json!({"output": 1}))
    }))
    .await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    define_in_code(&client, "local", "l.l").await;
    let node = client.engine().node_id().to_string();
    let now = || chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap();
    let placed: HashMap<String, _> = client
        .store()
        .jobs_list(now())
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.job.id.clone(), j.placement))
        .collect();
    assert!(placed["local"].served);
    assert_eq!(placed["local"].nodes, std::slice::from_ref(&node));
    assert!(placed["local"].endpoint.is_none());
    assert!(placed["remote"].served);
    assert_eq!(placed["remote"].endpoint.as_ref().unwrap().url, app.url);

    // The node stops saying it is alive: after 20 s nothing serves either job.
    clock.advance(Duration::from_secs(25));
    let jobs = client.store().jobs_list(now()).await.unwrap();
    assert!(jobs.iter().all(|j| !j.placement.served), "{jobs:?}");
    let api: Value = serde_json::to_value(&jobs).unwrap();
    assert_eq!(api[0]["placement"]["served"], json!(false));

    // A node that shut down is forgotten at once.
    client.engine().beat().await.unwrap();
    client.shutdown().await;
    let reader = db.sender(&clock).await;
    let nodes = reader.store().nodes_list(clock.now_ms()).await.unwrap();
    assert!(nodes.iter().all(|n| n.id != node), "{nodes:?}");
}

/// Waits until `client`'s engine defines job `id` (its registry picked the endpoint up).
async fn defined(client: &Client, id: &str) {
    wait_for("the endpoint's job to be defined", || async {
        client
            .engine()
            .job_ids()
            .iter()
            .any(|j| j == id)
            .then_some(())
    })
    .await;
}

async fn nodes_pick_up_endpoints_registered_elsewhere(db: TestDb) {
    let app = App::start(serving(vec![job("shared-work", "w.w")], |req| {
        json_answer(json!({"output": req["run"]["id"]}))
    }))
    .await;
    let (api_node, clock) = db.client().await;
    let api_registry = Registry::new(api_node.clone());
    // The worker node runs the endpoint's jobs; the API node only registers it.
    let (worker, _) = db.client().await;
    let worker_registry = Registry::new(worker.clone());
    worker_registry.start(Vec::new()).await.unwrap();
    api_registry
        .add(&app.url, Some(SECRET.into()))
        .await
        .unwrap();
    api_node.shutdown().await;
    let sender = db.sender(&clock).await;
    defined(&worker, "shared-work").await;
    let sent = sender.send_event("w.w", &json!({})).await.unwrap();
    let run = run_of(&sender, &sent.id, "shared-work").await;
    assert_eq!(run.run.status, RunStatus::Succeeded);
    assert_eq!(run.run.node.as_deref(), Some(worker.engine().node_id()));
    worker_registry.stop();
    worker.shutdown().await;
}

async fn endpoints_given_at_start_are_indexed_once_their_application_answers(db: TestDb) {
    let app = App::start(|_| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            vec![],
            b"starting".to_vec(),
        )
    })
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry
        .start(vec![flare::config::EndpointSeed {
            url: app.url.clone(),
            secret: SECRET.into(),
        }])
        .await
        .expect("a valid seed is stored at once");
    let first = wait_for("the first index to fail and be recorded", || async {
        let e = registry.list().await.unwrap().pop()?;
        (!e.recent_errors.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(first.health, EndpointHealth::Unindexed);
    assert!(
        first.recent_errors[0].message.contains("HTTP 503"),
        "{first:?}"
    );
    // The application comes up: the background retry indexes it and the job runs.
    app.set(serving(vec![job("late", "l.l")], |_| {
        json_answer(json!({"output": "late"}))
    }));
    defined(&client, "late").await;
    let sent = client.send_event("l.l", &json!({})).await.unwrap();
    assert_eq!(
        run_of(&client, &sent.id, "late").await.run.output,
        Some(json!("late"))
    );
    registry.stop();
    client.shutdown().await;
}

/// The JSON API of a `flare serve` router, called with or without its key.
struct Api {
    router: axum::Router,
    key: Option<&'static str>,
}

impl Api {
    /// One request: status and JSON body.
    async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = http::json_request(method, uri, body);
        if let Some(key) = self.key {
            let bearer = format!("Bearer {key}").parse().expect("header");
            req.headers_mut().insert("authorization", bearer);
        }
        let answer = http::call(&self.router, req).await;
        (answer.status, answer.json)
    }

    /// One request that must answer `status`; its JSON body.
    async fn expect(
        &self,
        status: StatusCode,
        method: &str,
        uri: &str,
        body: Option<Value>,
    ) -> Value {
        let (got, body) = self.call(method, uri, body).await;
        assert_eq!(got, status, "{method} {uri}: {body}");
        body
    }
}

async fn the_json_api_adds_lists_reindexes_and_removes_endpoints(db: TestDb) {
    let app = App::start(serving(vec![job("api-job", "a.b")], |_| {
        json_answer(json!({"output": 1}))
    }))
    .await;
    let (client, _clock) = db.client().await;
    const KEY: &str = "an-api-key-long-enough";
    let router = support::sample::router(&client, db.url.clone(), Some(KEY));
    let add = json!({"url": app.url, "secret": SECRET});

    // The API key guards registration: nobody without it makes Flare call a URL.
    let anonymous = Api {
        router: router.clone(),
        key: None,
    };
    anonymous
        .expect(
            StatusCode::UNAUTHORIZED,
            "POST",
            "/api/endpoints",
            Some(add.clone()),
        )
        .await;
    assert!(client.store().endpoints_load().await.unwrap().is_empty());

    let api = Api {
        router,
        key: Some(KEY),
    };
    let body = api
        .expect(
            StatusCode::CREATED,
            "POST",
            "/api/endpoints",
            Some(add.clone()),
        )
        .await;
    assert_eq!(body["jobs"], json!(["api-job"]));
    assert_eq!(body["health"], json!("ok"));
    assert!(
        body.get("secret").is_none(),
        "the secret is never shown: {body}"
    );
    let id = body["id"].as_str().unwrap().to_string();
    let one = format!("/api/endpoints/{id}");
    let reindex = format!("/api/endpoints/{id}/index");

    for (body, status) in [
        (add, StatusCode::CONFLICT),
        (json!({"url": "gopher://x"}), StatusCode::BAD_REQUEST),
        (json!({"url": app.url}), StatusCode::BAD_REQUEST),
        (
            json!({"url": app.url, "secret": SECRET, "x": 1}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"url": "http://127.0.0.1:9/none", "secret": SECRET}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let answer = api
            .expect(status, "POST", "/api/endpoints", Some(body))
            .await;
        assert!(answer["error"].is_string(), "{answer}");
    }

    let listed = api
        .expect(StatusCode::OK, "GET", "/api/endpoints", None)
        .await;
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 1);
    assert!(
        !listed.to_string().contains(SECRET),
        "the secret is never shown"
    );
    api.expect(StatusCode::OK, "GET", &one, None).await;
    api.expect(StatusCode::NOT_FOUND, "GET", "/api/endpoints/ep_nope", None)
        .await;
    let jobs = api.expect(StatusCode::OK, "GET", "/api/jobs", None).await;
    assert_eq!(
        jobs["jobs"][0]["placement"]["endpoint"]["url"],
        json!(app.url),
        "{jobs}"
    );

    app.set(|_| json_answer(json!({"jobs": []})));
    let body = api.expect(StatusCode::OK, "POST", &reindex, None).await;
    assert_eq!(body["removedJobs"], json!(["api-job"]));
    app.set(|_| json_answer(json!({"jobs": 5})));
    api.expect(StatusCode::UNPROCESSABLE_ENTITY, "POST", &reindex, None)
        .await;

    let body = api.expect(StatusCode::OK, "DELETE", &one, None).await;
    assert_eq!(body["removed"], json!(id));
    api.expect(StatusCode::NOT_FOUND, "DELETE", &one, None)
        .await;

    let nodes = api.expect(StatusCode::OK, "GET", "/api/nodes", None).await;
    let ours = json!(client.engine().node_id());
    assert!(
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == ours),
        "{nodes}"
    );
    client.shutdown().await;
}

backend_tests!(
    endpoints_given_at_start_are_indexed_once_their_application_answers,
    the_json_api_adds_lists_reindexes_and_removes_endpoints,
    an_endpoints_jobs_run_like_rust_jobs,
    an_error_answer_is_retried_and_its_events_are_sent_once,
    retry_false_fails_the_run_at_once,
    bad_answers_fail_the_attempt_with_a_clear_error,
    a_bad_index_is_refused_whole_and_stores_nothing,
    reindex_removes_vanished_jobs_and_cancels_their_queued_runs,
    job_ids_are_one_namespace,
    a_job_no_live_node_serves_is_flagged,
    nodes_pick_up_endpoints_registered_elsewhere,
);
