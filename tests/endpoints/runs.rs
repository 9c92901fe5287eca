//! Runs of an endpoint's jobs: output and logs as Rust jobs have them, an error answer retried
//! with its events sent once, `retry: false` failing at once, and every bad answer a clear attempt
//! error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use flare::store::endpoints::EndpointHealth;
use flare::RunStatus;
use serde_json::{json, Value};

use crate::backend_tests;
use crate::fixture::{job, json_answer, registry, run_of, serving, App, SECRET};
use crate::support::{wait_for, TestDb};

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
        "huge-status", "json-status",
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
            // The status is the outcome, however large the body: not "larger than 1 MiB".
            "huge-status" => (
                StatusCode::INTERNAL_SERVER_ERROR,
                vec![("content-type", "text/plain".into())],
                vec![b'x'; 20 * 1024 * 1024],
            ),
            "json-status" => (
                StatusCode::SERVICE_UNAVAILABLE,
                vec![],
                json!({"error": "warming up"}).to_string().into_bytes(),
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
        ("status", "the endpoint answered HTTP 500"),
        ("huge-status", "the endpoint answered HTTP 500"),
        ("json-status", "the endpoint answered HTTP 503: warming up"),
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
        // A body that is not JSON is never quoted (only a JSON error's message is).
        assert!(
            !error.contains("database exploded") && !error.contains("<html>"),
            "{id}: {error}"
        );
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

backend_tests!(
    an_endpoints_jobs_run_like_rust_jobs,
    an_error_answer_is_retried_and_its_events_are_sent_once,
    retry_false_fails_the_run_at_once,
    bad_answers_fail_the_attempt_with_a_clear_error,
);
