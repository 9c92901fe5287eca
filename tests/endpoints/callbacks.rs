//! Version 2 of the protocol: `callback` and `waitForCallback` steps, with a scripted endpoint
//! playing an SDK. The `callback` answer makes the token (the engine's `io.callback`) and Flare
//! calls again at once with it (`{token, path, deadline}`), so the job can hand the URL on before
//! it waits; `waitForCallback` waits holding no slot until `POST /callbacks/{token}` (its body is
//! the step's output) or the deadline (`null`); a post that comes between the two answers is
//! kept; waiting for a callback never made fails the run.

use std::time::Duration;

use axum::http::StatusCode;
use flare::model::{StepKind, StepStatus};
use flare::{Client, Clock, RunStatus};
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{json_answer, registry, run_of, Answer, App, SECRET};
use crate::steps::{job, serving_v2};
use crate::support::http::call;
use crate::support::{sample, wait_for, TestDb};

const DAY_MS: i64 = 86_400_000;

/// `approve` (on `approval.asked`) makes the callback `ask` (a day), "mails" its path in the step
/// `mail`, waits for it and returns the body posted with the path. The answer that waits is
/// delayed by `p.delayMs`.
fn approver() -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    serving_v2(vec![job("approve", "approval.asked", 1)], |req| {
        let steps = &req["steps"];
        let ask = &steps["ask"];
        let Some(callback) = ask.get("callback") else {
            return json_answer(
                json!({"steps": [{"key": "ask", "op": "callback", "timeoutMs": DAY_MS}]}),
            );
        };
        let Some(answer) = ask.get("output") else {
            let mut reached = vec![];
            if steps.get("mail").is_none() {
                reached.push(json!({"key": "mail", "op": "run", "output": callback["path"]}));
            }
            reached.push(json!({"key": "ask", "op": "waitForCallback"}));
            let mut answer = json_answer(json!({ "steps": reached }));
            if let Some(ms) = req["event"]["payload"]["delayMs"].as_u64() {
                answer.1.push(("x-test-delay-ms", ms.to_string()));
            }
            return answer;
        };
        json_answer(json!({"output": {"answer": answer, "path": steps["mail"]["output"]}}))
    })
}

/// The callback the endpoint was told of, once it was.
async fn told(app: &App) -> Value {
    wait_for("the endpoint to be told its callback", || async {
        app.runs_seen()
            .into_iter()
            .find_map(|r| r["steps"]["ask"].get("callback").cloned())
    })
    .await
}

async fn waiting(client: &Client, run_id: &str) {
    wait_for("the run to wait for its callback", || async {
        let d = client.store().run_detail(run_id).await.unwrap()?;
        let waits = d.steps.iter().any(|s| {
            s.key == "ask" && s.kind == StepKind::Callback && s.status == StepStatus::Waiting
        });
        (waits && d.run.status == RunStatus::Queued).then_some(())
    })
    .await;
}

async fn post(client: &Client, db: &TestDb, path: &str, body: &str) -> StatusCode {
    let app = sample::router(client, db.url.clone(), None);
    let req = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    call(&app, req).await.status
}

async fn a_post_to_the_path_told_resumes_the_run_with_its_body(db: TestDb) {
    let app = App::start(approver()).await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let asked_at = clock.now_ms();
    let sent = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let run_id = sent.run_ids[0].clone();
    let callback = told(&app).await;
    waiting(&client, &run_id).await;
    wait_for("a waiting run to hold no slot", || async {
        (client.engine().in_flight() == 0).then_some(())
    })
    .await;
    let token = callback["token"].as_str().expect("a token");
    assert!(token.len() > 60, "unguessable: {token}");
    let path = format!("/callbacks/{token}");
    assert_eq!(callback["path"], json!(path));
    let deadline = chrono::DateTime::parse_from_rfc3339(callback["deadline"].as_str().unwrap())
        .expect("an RFC 3339 deadline");
    assert_eq!(deadline.timestamp_millis(), asked_at + DAY_MS);
    // Told at once, in the call right after the answer that made it.
    let calls = app.runs_seen();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[1]["steps"]["ask"].get("output").is_none());

    assert_eq!(
        post(&client, &db, &path, r#"{"approved": true}"#).await,
        StatusCode::OK
    );
    let run = run_of(&client, &sent.id, "approve").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(
        run.run.output,
        Some(json!({"answer": {"approved": true}, "path": path}))
    );
    assert_eq!(run.run.attempt, 1);
    let step = run.steps.iter().find(|s| s.key == "ask").unwrap();
    assert_eq!(
        (step.kind, step.status),
        (StepKind::Callback, StepStatus::Succeeded)
    );
    let last = app.runs_seen().pop().unwrap();
    assert_eq!(
        last["steps"]["ask"],
        json!({"callback": callback, "output": {"approved": true}})
    );
    // Once only.
    assert_eq!(
        post(&client, &db, &path, r#"{"approved": false}"#).await,
        StatusCode::NOT_FOUND
    );
    client.shutdown().await;
}

async fn the_deadline_resumes_the_run_with_null(db: TestDb) {
    let app = App::start(approver()).await;
    let (client, clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let callback = told(&app).await;
    waiting(&client, &sent.run_ids[0]).await;
    clock.advance(Duration::from_millis(DAY_MS as u64));
    client.engine().wake();
    let run = run_of(&client, &sent.id, "approve").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(run.run.output.as_ref().unwrap()["answer"], Value::Null);
    let last = app.runs_seen().pop().unwrap();
    assert_eq!(last["steps"]["ask"]["output"], Value::Null);
    let path = callback["path"].as_str().unwrap().to_string();
    assert_eq!(
        post(&client, &db, &path, "{}").await,
        StatusCode::NOT_FOUND,
        "too late"
    );
    client.shutdown().await;
}

async fn a_post_before_the_run_waits_is_kept(db: TestDb) {
    let app = App::start(approver()).await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    // The answer that waits comes a second late: the post is there before it.
    let sent = client
        .send_event("approval.asked", &json!({"delayMs": 1000}))
        .await
        .unwrap();
    let callback = told(&app).await;
    let path = callback["path"].as_str().unwrap().to_string();
    assert_eq!(
        post(&client, &db, &path, r#"{"early": true}"#).await,
        StatusCode::OK
    );
    let run = run_of(&client, &sent.id, "approve").await;
    assert_eq!(run.run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(
        run.run.output.as_ref().unwrap()["answer"],
        json!({"early": true})
    );
    client.shutdown().await;
}

async fn waiting_for_a_callback_never_made_fails_the_run(db: TestDb) {
    let app = App::start(serving_v2(vec![job("lost", "a.lost", 3)], |_| {
        json_answer(json!({"steps": [{"key": "nowhere", "op": "waitForCallback"}]}))
    }))
    .await;
    let (client, _clock, registry) = registry(&db).await;
    registry.add(&app.url, Some(SECRET.into())).await.unwrap();
    let sent = client.send_event("a.lost", &json!({})).await.unwrap();
    let run = run_of(&client, &sent.id, "lost").await;
    assert_eq!(run.run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(run.run.attempt, 1, "no retry fixes it");
    let error = run.run.error.unwrap_or_default();
    assert!(
        error.contains("step \"nowhere\"") && error.contains("no callback step"),
        "{error}"
    );
    client.shutdown().await;
}

backend_tests!(
    a_post_to_the_path_told_resumes_the_run_with_its_body,
    the_deadline_resumes_the_run_with_null,
    a_post_before_the_run_waits_is_kept,
    waiting_for_a_callback_never_made_fails_the_run,
);
