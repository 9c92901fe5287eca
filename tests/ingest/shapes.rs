//! An array in place of an object, at any depth of a JSON body, is a 400 JSON error on every JSON
//! route, and nothing is stored or changed. serde would otherwise read a struct's fields in order
//! from an array (`{"event": ["x.y", {…}, null, "arr-id-1"]}` stored event `x.y` with id
//! `arr-id-1`); `flare::strict_json` refuses it.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};

use crate::app::{start, TestApp};
use crate::support::http::Answer;

/// Asserts `res` is the 400 that says an object was expected.
fn assert_refused(res: &Answer, what: &str) {
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{what}: {}", res.text);
    let error = res.error();
    assert!(
        error.contains("expected a JSON object") || error.contains("must be a JSON object"),
        "{what}: {error}"
    );
}

async fn event_count(app: &TestApp) -> usize {
    let res = app
        .call(
            Request::get("/api/events?limit=500")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    res.json["events"].as_array().expect("events").len()
}

async fn assert_no_event(app: &TestApp, id: &str) {
    assert!(
        app.client.event(id).await.expect("read").is_none(),
        "{id} was stored"
    );
}

#[tokio::test]
async fn trigger_refuses_an_array_delay() {
    let app = start(|_| {}).await;
    // Read as the units in order, this was 1 s + 2 min.
    let res = app
        .post_json(
            "/trigger",
            &json!({"event": "audit.noted", "id": "arr-delay", "delay": [1, 2]}),
        )
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.text);
    assert!(
        res.error().contains("`delay` must be an object"),
        "{}",
        res.text
    );
    assert_no_event(&app, "arr-delay").await;
    assert_eq!(event_count(&app).await, 0);
}

#[tokio::test]
async fn trigger_dev_send_refuses_an_array_event_or_options() {
    let app = start(|_| {}).await;
    let res = app
        .post_json(
            "/api/v1/events",
            &json!({"event": ["x.y", {"k": 1}, null, "arr-id-1"]}),
        )
        .await;
    assert_refused(&res, "event");
    assert_no_event(&app, "arr-id-1").await;
    let res = app
        .post_json(
            "/api/v1/events",
            &json!({"event": {"name": "x.y", "id": "arr-opt-1"}, "options": ["2031-01-01T00:00:00Z", null]}),
        )
        .await;
    assert_refused(&res, "options");
    assert_no_event(&app, "arr-opt-1").await;
    assert_eq!(event_count(&app).await, 0);
}

#[tokio::test]
async fn trigger_dev_bulk_refuses_an_array_event_or_options() {
    let app = start(|_| {}).await;
    for body in [
        json!({"events": [{"name": "x.y", "id": "bulk-ok"}, ["x.y", {}, null, "bulk-arr"]]}),
        json!({"events": [{"name": "x.y", "id": "bulk-ok"}], "options": ["2031-01-01T00:00:00Z"]}),
    ] {
        let res = app.post_json("/api/v1/events/bulk", &body).await;
        assert_refused(&res, &body.to_string());
    }
    assert_no_event(&app, "bulk-ok").await;
    assert_no_event(&app, "bulk-arr").await;
    assert_eq!(event_count(&app).await, 0);
}

#[tokio::test]
async fn inngest_refuses_an_array_event() {
    let app = start(|_| {}).await;
    // Read in order, this was {name: "x.y", data: {"k": 1}, id: "inn-arr-1"}.
    let res = app
        .post_json(
            "/e/any-key",
            &json!([{"name": "x.y", "id": "inn-ok"}, ["x.y", {"k": 1}, "inn-arr-1"]]),
        )
        .await;
    assert_refused(&res, "inngest");
    assert!(res.error().contains("index 1"), "{}", res.text);
    assert_no_event(&app, "inn-ok").await;
    assert_no_event(&app, "inn-arr-1").await;
}

#[tokio::test]
async fn runs_bulk_refuses_an_array_filter() {
    let app = start(|_| {}).await;
    app.client
        .register_job(
            flare::Job::new("held", "Held", "1.0.0")
                .trigger(flare::event_trigger("held.thing"))
                .run(|_: Value, _io: flare::Io| async move { Ok(Value::Null) }),
        )
        .await
        .expect("define");
    let pause = app.post_json("/api/jobs/held/pause", &json!({})).await;
    assert_eq!(pause.status, StatusCode::OK, "{}", pause.text);
    let sent = app
        .post_json("/trigger", &json!({"event": "held.thing", "id": "held-1"}))
        .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.text);
    // Read in order, this filter was {jobId: "held"} and cancelled its run.
    let res = app
        .post_json(
            "/api/runs/bulk",
            &json!({"action": "cancel", "filter": ["held"]}),
        )
        .await;
    assert_refused(&res, "runs filter");
    let stored = app
        .client
        .event("held-1")
        .await
        .expect("read")
        .expect("event");
    let run = app
        .client
        .store()
        .run_detail(&stored.run_ids[0])
        .await
        .expect("read")
        .expect("run");
    assert_eq!(
        run.run.status,
        flare::RunStatus::Queued,
        "nothing was cancelled"
    );
}

#[tokio::test]
async fn events_bulk_refuses_an_array_filter() {
    let app = start(|_| {}).await;
    let sent = app
        .post_json("/trigger", &json!({"event": "audit.noted"}))
        .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.text);
    // Read in order, this filter was {name: "audit.noted"} and replayed the event.
    let res = app
        .post_json(
            "/api/events/bulk",
            &json!({"action": "replay", "filter": ["audit.noted"]}),
        )
        .await;
    assert_refused(&res, "events filter");
    assert_eq!(event_count(&app).await, 1, "nothing was replayed");
}

#[tokio::test]
async fn replay_and_endpoints_refuse_an_array_body() {
    // Neither body holds a nested object (a replay's payload is any JSON); the body itself
    // must be one.
    let app = start(|_| {}).await;
    let sent = app
        .post_json("/trigger", &json!({"event": "audit.noted"}))
        .await;
    let id = sent.json["result"]["id"].as_str().expect("id").to_string();
    let res = app
        .post_json(&format!("/api/events/{id}/replay"), &json!([{"a": 1}]))
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.text);
    assert!(
        res.error().contains("must be a JSON object"),
        "{}",
        res.text
    );
    let res = app
        .post_json(
            "/api/endpoints",
            &json!(["http://127.0.0.1:9/", "whsec_c2hhcGVzLXRlc3Qtc2VjcmV0"]),
        )
        .await;
    assert_refused(&res, "endpoints");
    assert_eq!(event_count(&app).await, 1);
    let listed = app
        .call(
            Request::get("/api/endpoints")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(listed.json["endpoints"], json!([]), "{}", listed.text);
}

#[tokio::test]
async fn trigger_dev_v2_platform_routes_refuse_arrays_before_anything_else() {
    let app = start(|_| {}).await;
    let post = |path: &str, body: Value| {
        Request::post(path.to_string())
            .header("content-type", "application/json")
            .header("authorization", "Bearer tr_dev_shapesTestKey")
            .body(Body::from(body.to_string()))
            .expect("request")
    };
    // Read in order, this registered (and called) the URL.
    let res = app
        .call(post(
            "/api/v1/endpoints",
            json!(["http://127.0.0.1:9/", "shapes"]),
        ))
        .await;
    assert_refused(&res, "register");
    // The task routes check the body before looking for the run's execution (there is none:
    // a well-formed body is a 409).
    for (path, body) in [
        ("/api/v1/runs/r1/tasks", json!(["key-1", "log"])),
        (
            "/api/v1/runs/r1/tasks",
            json!({"idempotencyKey": "key-2", "name": "Send Event",
                   "params": {"event": ["x.y", {"k": 1}, null, "task-arr"]}}),
        ),
        (
            "/api/v1/runs/r1/tasks",
            json!({"idempotencyKey": "key-3", "name": "Send Event",
                   "params": {"event": {"name": "x.y"}, "options": ["2031-01-01T00:00:00Z"]}}),
        ),
        ("/api/v1/runs/r1/tasks/t1/complete", json!(["\"out\""])),
        (
            "/api/v1/runs/r1/tasks/t1/fail",
            json!({"error": ["boom", "Error"]}),
        ),
    ] {
        let res = app.call(post(path, body.clone())).await;
        assert_refused(&res, &format!("{path} {body}"));
    }
    let well_formed = app
        .call(post(
            "/api/v1/runs/r1/tasks/t1/fail",
            json!({"error": {"message": "boom"}}),
        ))
        .await;
    assert_eq!(
        well_formed.status,
        StatusCode::CONFLICT,
        "{}",
        well_formed.text
    );
    let listed = app
        .call(
            Request::get("/api/endpoints")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(listed.json["endpoints"], json!([]), "{}", listed.text);
    assert_no_event(&app, "task-arr").await;
}
