//! Behaviour suite: `io.callback` — an unguessable URL path whose `POST` of JSON (no API key)
//! resumes the waiting run with the body, once; refused (404, nothing changed) when unknown,
//! used or past its deadline, or when its run was cancelled; a body that is not JSON or too
//! large is refused; a post that arrives before the run waits is kept.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use flare::{event_trigger, Client, Io, Job, RunStatus};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use crate::backend_tests;
use crate::support::http::{call, json_request, Answer};
use crate::support::{sample, settled, wait_for, TestDb};

const DAY: Duration = Duration::from_secs(86_400);

fn approver() -> Job {
    Job::new("approver", "Approver", "1.0.0")
        .trigger(event_trigger("approval.asked"))
        .run(|_p: Value, io: Io| async move {
            let cb = io.callback("approve", DAY).await?;
            let answer = io.wait_for_callback(&cb).await?;
            Ok(json!({ "answer": answer, "path": cb.url_path() }))
        })
}

/// The token of the callback `run_id` waits on.
async fn token(client: &Client, run_id: &str) -> String {
    wait_for("the run to wait for its callback", || async {
        let d = client.store().run_detail(run_id).await.unwrap()?;
        let w = d.wait.filter(|_| d.run.status == RunStatus::Queued)?;
        (w.event == "flare/callback").then_some(w.match_value?)
    })
    .await
}

async fn post(app: &axum::Router, token: &str, body: &str) -> Answer {
    let req = axum::http::Request::post(format!("/callbacks/{token}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    call(app, req).await
}

async fn a_post_resumes_the_run_with_its_body_once(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(approver()).unwrap();
    let ev = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let t = token(&client, &ev.run_ids[0]).await;
    assert!(t.len() > 60, "unguessable: {t}");
    let app = sample::router(
        &client,
        db.url.clone(),
        Some("k3y-for-the-callback-test-0123456789abcdefXYZ"),
    );

    // Unknown tokens change nothing.
    let a = post(&app, "cb_nope", r#"{"ok": true}"#).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    // Not JSON, too large: refused, the run still waits.
    let a = post(&app, &t, "not json").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    let big = format!(r#"{{"x": "{}"}}"#, "a".repeat(300 * 1024));
    let a = post(&app, &t, &big).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", a.text);
    token(&client, &ev.run_ids[0]).await;

    // No API key needed.
    let a = post(&app, &t, r#"{"approved": true}"#).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded);
    assert_eq!(
        d.runs[0].output,
        Some(json!({ "answer": { "approved": true }, "path": format!("/callbacks/{t}") }))
    );
    // Single use.
    let a = post(&app, &t, r#"{"approved": false}"#).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
}

async fn a_callback_past_its_deadline_is_refused_and_the_run_goes_on_without(db: TestDb) {
    let (client, clock) = db.client().await;
    client.define_job(approver()).unwrap();
    let ev = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let t = token(&client, &ev.run_ids[0]).await;
    let app = sample::router(&client, db.url.clone(), None);
    let page = call(
        &app,
        json_request("GET", &format!("/runs/{}", ev.run_ids[0]), None),
    )
    .await;
    assert!(
        page.text.contains(&format!("POST /callbacks/{t}")),
        "the run page shows the URL"
    );
    clock.advance(DAY);
    let a = post(&app, &t, r#"{"approved": true}"#).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    client.engine().wake();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].output.as_ref().unwrap()["answer"], Value::Null);
}

async fn a_post_before_the_run_waits_is_kept(db: TestDb) {
    let (client, _clock) = db.client().await;
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let go = Arc::new(Notify::new());
    let first = Arc::new(AtomicBool::new(true));
    let tx = Arc::new(Mutex::new(Some(tx)));
    let (g, f) = (Arc::clone(&go), Arc::clone(&first));
    client
        .define_job(
            Job::new("early", "Early", "1.0.0")
                .trigger(event_trigger("approval.asked"))
                .run(move |_p: Value, io: Io| {
                    let (g, f, tx) = (Arc::clone(&g), Arc::clone(&f), Arc::clone(&tx));
                    async move {
                        let cb = io.callback("approve", DAY).await?;
                        if f.swap(false, Ordering::SeqCst) {
                            // Hand the token out, and wait until it was posted to.
                            if let Some(tx) = tx.lock().unwrap().take() {
                                tx.send(cb.token().to_string()).unwrap();
                            }
                            g.notified().await;
                        }
                        let answer = io.wait_for_callback(&cb).await?;
                        Ok(json!({ "answer": answer }))
                    }
                }),
        )
        .unwrap();
    let ev = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let t = rx.recv().await.unwrap();
    let app = sample::router(&client, db.url.clone(), None);
    let a = post(&app, &t, r#"{"early": 1}"#).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    go.notify_one();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].output, Some(json!({ "answer": { "early": 1 } })));
}

async fn a_cancelled_runs_callback_is_refused(db: TestDb) {
    let (client, _clock) = db.client().await;
    client.define_job(approver()).unwrap();
    let ev = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let t = token(&client, &ev.run_ids[0]).await;
    client.engine().run_cancel(&ev.run_ids[0]).await.unwrap();
    let app = sample::router(&client, db.url.clone(), None);
    let a = post(&app, &t, r#"{"approved": true}"#).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    let d = client
        .store()
        .run_detail(&ev.run_ids[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.run.status, RunStatus::Cancelled);
    assert!(
        d.wait.is_none(),
        "a cancelled run waits for nothing: {:?}",
        d.wait
    );
}

/// PostgreSQL, two processes: the callback is answered through one without workers (the
/// server a `POST` reached), and the process running the job, whose next poll is an hour
/// away, resumes the run at once (`NOTIFY`). A retry asked there, alone or in bulk, is run at
/// once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_answer_or_a_retry_on_another_process_wakes_the_one_running_the_job() {
    let Some(db) = TestDb::new_or_skip(crate::support::Backend::Postgres).await else {
        return;
    };
    let config = flare::EngineConfig {
        poll_interval: Duration::from_secs(3_600),
        ..crate::support::test_config()
    };
    let (client, clock) = db.client_with(config).await;
    client.define_job(approver()).unwrap();
    let server = db.sender(&clock).await;
    let ev = client
        .send_event("approval.asked", &json!({}))
        .await
        .unwrap();
    let t = token(&client, &ev.run_ids[0]).await;
    let now = flare::Clock::now_ms(&clock);
    let answered = server
        .store()
        .callback_resolve(&t, json!({ "approved": true }), now)
        .await
        .unwrap();
    assert!(answered);
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Succeeded, "{:?}", d.runs[0]);

    client
        .define_job(
            Job::new("flop", "Flop", "1.0.0")
                .trigger(event_trigger("flop.asked"))
                .retry(flare::RetryPolicy::default().max_attempts(1))
                .run(|_p: Value, _io: Io| async move {
                    Err::<Value, flare::JobError>(flare::JobError::fatal("flopped"))
                }),
        )
        .unwrap();
    let ev = client.send_event("flop.asked", &json!({})).await.unwrap();
    let d = settled(&client, &ev.id).await;
    assert_eq!(d.runs[0].status, RunStatus::Failed);
    server
        .store()
        .run_retry(&ev.run_ids[0], flare::Clock::now_ms(&clock))
        .await
        .unwrap();
    let ran = |attempt: u32| {
        let (client, id) = (&client, &ev.run_ids[0]);
        wait_for("the retried run to run again", move || async move {
            let d = client.store().run_detail(id).await.unwrap()?;
            (d.run.status == RunStatus::Failed && d.run.attempt == attempt).then_some(())
        })
    };
    ran(2).await;
    // The dashboard's bulk retry, the same.
    let n = server
        .store()
        .runs_bulk(
            flare::store::BulkRunAction::Retry,
            vec![ev.run_ids[0].clone()],
            flare::Clock::now_ms(&clock),
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    ran(3).await;
}

backend_tests!(
    a_post_resumes_the_run_with_its_body_once,
    a_cancelled_runs_callback_is_refused,
    a_callback_past_its_deadline_is_refused_and_the_run_goes_on_without,
    a_post_before_the_run_waits_is_kept,
);
