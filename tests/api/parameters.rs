//! Bad parameters are 400 and name the parameter; NUL characters in ids and filters are 400 or
//! 404 on every backend.

use axum::http::StatusCode;
use flare::model::Source;
use flare::SendEvent;
use serde_json::json;

use crate::backend_tests;
use crate::fixture::{bare_app, fixture, request};
use crate::support::TestDb;

async fn bad_parameters_are_400_and_name_the_parameter(db: TestDb) {
    let f = fixture(db).await;
    for (uri, name) in [
        ("/api/events?limit=0", "limit"),
        ("/api/events?limit=501", "limit"),
        ("/api/events?limit=ten", "limit"),
        ("/api/events?status=done", "status"),
        ("/api/events?from=yesterday", "from"),
        ("/api/events?to=2024-05-01", "to"),
        ("/api/events?cursor=garbage", "cursor"),
        ("/api/events?nme=user.created", "nme"),
        ("/api/events?name=a.b&name=c.d", "name"),
        ("/api/runs?status=done", "status"),
        ("/api/runs?limit=-1", "limit"),
        ("/api/runs?job=greet", "job"),
        ("/api/stats?window=7d", "window"),
        ("/api/jobs?x=1", "x"),
    ] {
        let (status, body) = f.call("GET", uri, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        let message = body["error"].as_str().expect("error message");
        assert!(message.contains(name), "{uri}: {message}");
    }
    let max = f.get("/api/events?limit=500").await;
    assert_eq!(max["events"].as_array().expect("events").len(), 12);
}

/// PostgreSQL text cannot hold NUL: ids and filter text with one answer as on SQLite, never 503.
async fn nul_characters_in_ids_and_filters_are_400_or_404(db: TestDb) {
    let (client, app) = bare_app(&db).await;
    let sent = client
        .send_inserted(SendEvent::new("note.added", &json!({})), Source::Api)
        .await
        .expect("send");

    // Ids in paths: no stored id contains NUL, so no such record.
    for (method, uri) in [
        ("GET", "/api/events/a%00b"),
        ("GET", "/api/runs/a%00b"),
        ("POST", "/api/events/a%00b/replay"),
        ("POST", "/api/events/a%00b/cancel"),
        ("POST", "/api/runs/a%00b/retry"),
        ("GET", "/api/v1/events/a%00b"),
        ("POST", "/api/v1/events/a%00b/cancel"),
        ("GET", "/events/a%00b"),
        ("GET", "/runs/a%00b"),
    ] {
        let (status, body) = request(&app, method, uri, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}: {body}");
    }

    // Filters: a bad parameter, named.
    for (uri, name) in [
        ("/api/events?name=a%00b", "name"),
        ("/api/events?source=api%00", "source"),
        ("/api/events?q=%00", "q"),
        ("/api/runs?jobId=greet%00", "jobId"),
        ("/api/runs?eventId=a%00b", "eventId"),
    ] {
        let (status, body) = request(&app, "GET", uri, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        let message = body["error"].as_str().expect("error message");
        assert!(
            message.contains(name) && message.contains("NUL"),
            "{uri}: {message}"
        );
    }
    // The dashboard's lists (and the store itself) find nothing, on both backends.
    for uri in ["/events?name=a%00b&q=%00", "/runs?jobId=a%00b"] {
        let (status, body) = request(&app, "GET", uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    }
    let store = client.store();
    let nothing = store
        .events_list(flare::store::query::EventQuery {
            q: Some("\0".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    assert!(nothing.items.is_empty());
    assert!(store.event_detail("a\0b").await.expect("detail").is_none());

    // Sending an event whose id contains NUL is refused the same way everywhere.
    let err = client
        .send_event_with(SendEvent::new("note.added", &json!({})).id("a\0b"))
        .await
        .expect_err("a NUL in the id");
    assert!(matches!(err, flare::client::Error::InvalidId(_)), "{err}");
    for (uri, body) in [
        (
            "/trigger",
            json!({"event": "note.added", "payload": {}, "id": "a\u{0}b"}),
        ),
        (
            "/api/v1/events",
            json!({"event": {"name": "note.added", "payload": {}, "id": "a\u{0}b"}}),
        ),
        (
            "/api/v1/events/bulk",
            json!({"events": [{"name": "note.added", "payload": {}, "id": "a\u{0}b"}]}),
        ),
        (
            "/e/key",
            json!({"name": "note.added", "data": {}, "id": "a\u{0}b"}),
        ),
    ] {
        let (status, answer) = request(&app, "POST", uri, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {answer}");
        let message = answer["error"].as_str().expect("error message");
        assert!(message.contains("NUL"), "{uri}: {message}");
    }

    // NUL inside a JSON string of the payload is stored and read back.
    let payload = json!({"text": "a\u{0}b"});
    let (status, answer) = request(
        &app,
        "POST",
        "/trigger",
        Some(json!({"event": "note.added", "payload": payload})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let id = answer["result"]["id"].as_str().expect("id");
    let (status, detail) = request(&app, "GET", &format!("/api/events/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["payload"], payload);
    let (status, _) = request(&app, "GET", &format!("/api/events/{}", sent.event.id), None).await;
    assert_eq!(status, StatusCode::OK);
}

backend_tests!(
    bad_parameters_are_400_and_name_the_parameter,
    nul_characters_in_ids_and_filters_are_400_or_404,
);
