//! Storage that refuses writes: `/readyz` says so, and each failure says whether anything was
//! stored.

use axum::http::StatusCode;
use flare::model::Source;
use flare::SendEvent;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{bare_app, request};
use crate::support::TestDb;

/// `/readyz` writes: a database that refuses writes is not ready, and is again once it takes them.
async fn readiness_needs_storage_that_takes_writes(db: TestDb) {
    let (client, app) = bare_app(&db).await;
    let (status, body) = request(&app, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ready");

    client
        .store()
        .health_fail_writes(true)
        .await
        .expect("read-only");
    let (status, body) = request(&app, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = body["error"].as_str().expect("error message");
    assert!(message.contains("refuses writes"), "{message}");
    // Health (the process is up) does not look at storage.
    let (status, _) = request(&app, "GET", "/healthz", None).await;
    assert_eq!(status, StatusCode::OK);

    client
        .store()
        .health_fail_writes(false)
        .await
        .expect("writable");
    let (status, body) = request(&app, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A storage failure says "nothing was stored" only where something was to be stored.
async fn storage_failures_say_whether_anything_was_stored(db: TestDb) {
    let (client, app) = bare_app(&db).await;
    let sent = client
        .send_inserted(SendEvent::new("note.added", &json!({})), Source::Api)
        .await
        .expect("send");

    client
        .store()
        .health_fail_writes(true)
        .await
        .expect("read-only");
    let (status, body) = request(
        &app,
        "POST",
        "/trigger",
        Some(json!({"event": "note.added", "payload": {}})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body["error"],
        "storage is unavailable; nothing was stored, try again"
    );
    client
        .store()
        .health_fail_writes(false)
        .await
        .expect("writable");

    // Reads fail once the events table is gone.
    db.execute("ALTER TABLE events RENAME TO events_gone").await;
    let read = "storage is unavailable: could not read what was asked for; try again";
    for uri in [
        "/api/events".to_string(),
        format!("/api/events/{}", sent.event.id),
    ] {
        let (status, body) = request(&app, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}: {body}");
        assert_eq!(body["error"], read, "{uri}");
        let (status, _) = request(&app, "HEAD", &uri, None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "HEAD {uri}");
    }
    // A dashboard page says the same, as HTML.
    let (status, body) = request(&app, "GET", "/events", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let html = body.as_str().expect("html");
    assert!(html.contains("could not read"), "{html}");
    // A write that failed on its way (reading the event to replay) stored nothing.
    let (status, body) = request(
        &app,
        "POST",
        &format!("/api/events/{}/replay", sent.event.id),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body["error"],
        "storage is unavailable; nothing was stored, try again"
    );
}

backend_tests!(
    readiness_needs_storage_that_takes_writes,
    storage_failures_say_whether_anything_was_stored,
);
