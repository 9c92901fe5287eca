//! `POST /trigger`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::RunStatus;
use serde_json::json;

use crate::app::{start, START_MS};

fn raw_post(content_type: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut req = Request::post("/trigger");
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    req.body(body.into()).expect("request")
}

#[tokio::test]
async fn sends_the_event_and_answers_with_the_stored_event_and_its_runs() {
    let app = start(|_| {}).await;
    let res = app
        .post_json(
            "/trigger",
            &json!({"event": "user.created", "payload": {"userId": "u1", "email": "ada@example.com", "name": "Ada"}}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(res.json["success"], json!(true));
    assert_eq!(
        res.json["message"],
        json!("Event 'user.created' sent to the job platform")
    );
    let result = &res.json["result"];
    assert_eq!(result["name"], json!("user.created"));
    assert_eq!(result["source"], json!("http"));
    assert_eq!(result["payload"]["email"], json!("ada@example.com"));
    let runs = result["runIds"].as_array().expect("runIds");
    assert_eq!(runs.len(), 2, "welcome email and signup tracking");
    let id = result["id"].as_str().expect("id");
    let stored = app.client.event(id).await.expect("read").expect("stored");
    assert_eq!(stored.run_ids.len(), 2);
    for run in runs {
        assert_eq!(
            app.wait_run(run.as_str().expect("id")).await,
            RunStatus::Succeeded
        );
    }
}

#[tokio::test]
async fn payload_is_optional_and_a_repeated_id_starts_nothing_new() {
    let app = start(|_| {}).await;
    let first = app
        .post_json(
            "/trigger",
            &json!({"event": "audit.noted", "id": "fixed-1"}),
        )
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.json["result"]["payload"], json!(null));
    assert_eq!(first.json["result"]["id"], json!("fixed-1"));
    assert_eq!(first.json["duplicate"], json!(false));
    assert_eq!(first.json["conflict"], json!(false));

    // The same event again: a duplicate, without conflict.
    let same = app
        .post_json(
            "/trigger",
            &json!({"event": "audit.noted", "id": "fixed-1", "payload": null}),
        )
        .await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.text);
    assert_eq!(same.json["duplicate"], json!(true));
    assert_eq!(same.json["conflict"], json!(false));
    assert!(
        same.json.get("conflictingFields").is_none(),
        "{}",
        same.text
    );
    let message = same.json["message"].as_str().expect("message");
    assert!(message.contains("received before"), "{message}");

    // Another name and payload under the same id: the stored event, flagged as a conflict.
    let again = app
        .post_json(
            "/trigger",
            &json!({"event": "user.created", "id": "fixed-1", "payload": {}}),
        )
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.json["result"]["name"],
        json!("audit.noted"),
        "the stored event is returned unchanged"
    );
    assert_eq!(again.json["result"]["runIds"], json!([]));
    assert_eq!(again.json["duplicate"], json!(true));
    assert_eq!(again.json["conflict"], json!(true));
    assert_eq!(again.json["conflictingFields"], json!(["name", "payload"]));
    let message = again.json["message"].as_str().expect("message");
    assert!(
        message.contains("different name and payload") && message.contains("fixed-1"),
        "{message}"
    );
    let only_payload = app
        .post_json(
            "/trigger",
            &json!({"event": "audit.noted", "id": "fixed-1", "payload": {"who": "ada"}}),
        )
        .await;
    assert_eq!(only_payload.json["conflictingFields"], json!(["payload"]));
}

#[tokio::test]
async fn delays_in_every_form_schedule_the_event() {
    let app = start(|_| {}).await;
    let cases = [
        (json!({"hours": 1, "minutes": 30}), 90 * 60_000),
        (json!({"seconds": 5, "days": 1}), 86_400_000 + 5000),
        (json!({"minutes": 0.5}), 30_000),
        (json!("2h"), 2 * 3_600_000),
        (json!("1h30m"), 90 * 60_000),
    ];
    for (delay, ms) in cases {
        let res = app
            .post_json(
                "/trigger",
                &json!({"event": "reminder.send", "payload": {}, "delay": delay}),
            )
            .await;
        assert_eq!(res.status, StatusCode::OK, "{delay}: {}", res.text);
        let at = flare::model::ms_to_time(START_MS + ms);
        assert_eq!(res.json["result"]["deliverAt"], json!(at), "delay {delay}");
        assert_eq!(res.json["result"]["deliveredAt"], json!(null));
        assert_eq!(res.json["result"]["runIds"], json!([]));
    }
    let res = app
        .post_json(
            "/trigger",
            &json!({"event": "reminder.send", "deliverAt": "2030-01-02T00:00:00Z"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(
        res.json["result"]["deliverAt"],
        json!("2030-01-02T00:00:00Z")
    );
}

#[tokio::test]
async fn bad_requests_say_what_is_wrong() {
    let app = start(|_| {}).await;
    let cases = [
        (json!({"payload": {}}), "required fields are missing"),
        (
            json!({"event": "", "payload": {}}),
            "required fields are missing",
        ),
        (json!({"event": null}), "required fields are missing"),
        (json!({"event": "User Created"}), "invalid event name"),
        (json!({"event": 42}), "invalid request body"),
        (json!([1, 2]), "must be a JSON object"),
        (
            json!({"event": "a.b", "delay": {"hours": -1}}),
            "delay.hours",
        ),
        (
            json!({"event": "a.b", "delay": {"weeks": 1}}),
            "`delay` must be",
        ),
        (json!({"event": "a.b", "delay": "2y"}), "unknown unit"),
        (json!({"event": "a.b", "delay": 60}), "`delay` must be"),
        (json!({"event": "a.b", "delay": {"days": 400}}), "365 days"),
        (json!({"event": "a.b", "deliverAt": "tomorrow"}), "RFC 3339"),
        (
            json!({"event": "a.b", "delay": "1h", "deliverAt": "2030-01-02T00:00:00Z"}),
            "not both",
        ),
        (
            json!({"event": "a.b", "deliver_at": "2030-01-02T00:00:00Z"}),
            "unknown field",
        ),
        (json!({"event": "a.b", "id": ""}), "invalid event id"),
    ];
    for (body, needle) in cases {
        let res = app.post_json("/trigger", &body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.text);
        assert!(
            res.error().contains(needle),
            "{body}: {:?} should mention {needle:?}",
            res.error()
        );
    }
}

#[tokio::test]
async fn body_problems_are_json_errors_with_the_right_status() {
    let app = start(|_| {}).await;

    let empty = app.call(raw_post(None, Body::empty())).await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    assert!(empty.error().contains("required fields are missing"));

    let empty_json = app.call(raw_post(Some("application/json"), "")).await;
    assert_eq!(empty_json.status, StatusCode::BAD_REQUEST);
    assert!(empty_json.error().contains("required fields are missing"));

    let invalid = app
        .call(raw_post(Some("application/json"), "{\"event\": "))
        .await;
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
    assert!(
        invalid.error().contains("not valid JSON"),
        "{}",
        invalid.text
    );

    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let res = app.call(raw_post(ct, r#"{"event":"a.b"}"#)).await;
        assert_eq!(res.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        assert!(res.error().contains("application/json"));
    }

    let charset = app
        .call(raw_post(
            Some("application/json; charset=utf-8"),
            r#"{"event":"a.b"}"#,
        ))
        .await;
    assert_eq!(charset.status, StatusCode::OK, "{}", charset.text);
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_json_413_and_the_limit_is_configurable() {
    let app = start(|_| {}).await;
    let big = format!(
        r#"{{"event":"a.b","payload":"{}"}}"#,
        "x".repeat(1024 * 1024)
    );
    let res = app
        .call(raw_post(Some("application/json"), big.clone()))
        .await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(res.error().contains("larger"), "{}", res.text);
    assert_eq!(
        app.client.store().run_counts().await.expect("counts").len(),
        0
    );

    let just_under = format!(
        r#"{{"event":"a.b","payload":"{}"}}"#,
        "x".repeat(1024 * 1024 - 64)
    );
    let ok = app
        .call(raw_post(Some("application/json"), just_under))
        .await;
    assert_eq!(ok.status, StatusCode::OK);

    let small = start(|raw| raw.max_body_bytes = Some(64)).await;
    let res = small
        .call(raw_post(
            Some("application/json"),
            format!(r#"{{"event":"a.b","payload":"{}"}}"#, "x".repeat(100)),
        ))
        .await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE);
    res.error();
}

#[tokio::test]
async fn storage_down_is_503_and_nothing_is_stored() {
    let app = start(|_| {}).await;
    app.client
        .store()
        .health_fail_writes(true)
        .await
        .expect("switch");
    let res = app
        .post_json(
            "/trigger",
            &json!({"event": "user.created", "id": "while-down", "payload": {}}),
        )
        .await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(res.error().contains("storage"), "{}", res.text);
    assert!(!res.text.contains("readonly"), "no internals: {}", res.text);
    app.client
        .store()
        .health_fail_writes(false)
        .await
        .expect("switch");
    assert!(app
        .client
        .event("while-down")
        .await
        .expect("read")
        .is_none());
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_are_json() {
    let app = start(|_| {}).await;
    let missing = app
        .call(Request::get("/nope").body(Body::empty()).expect("req"))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    missing.error();
    let wrong = app
        .call(Request::get("/trigger").body(Body::empty()).expect("req"))
        .await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        wrong.error().contains("method not allowed"),
        "{}",
        wrong.text
    );
    assert!(wrong.headers.get("allow").is_some());
}

/// Found by `trigger_fuzz`: without serde_json's `float_roundtrip`, parsing a float could land one
/// unit in the last place away, so a payload number came back different from the one sent (once
/// when the body was parsed, again when the stored payload was read).
#[tokio::test]
async fn payload_numbers_are_stored_exactly_as_sent() {
    let app = start(|_| {}).await;
    let sent = r#"{"event": "audit.noted", "id": "floats", "payload": [3.5890139315184816e-273, 0.1, 1.7976931348623157e308, 5e-324, 18446744073709551615, -9223372036854775808]}"#;
    let res = app
        .call(
            Request::post("/trigger")
                .header("content-type", "application/json")
                .body(Body::from(sent))
                .expect("request"),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let stored = app
        .client
        .event("floats")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        stored.payload.to_string(),
        "[3.5890139315184816e-273,0.1,1.7976931348623157e+308,5e-324,18446744073709551615,-9223372036854775808]"
    );
}

/// Found by `trigger_fuzz`: a delay whose units add up past `Duration::MAX` panicked in the
/// handler (the connection dropped without an answer); it is a 400 like any delay over 365 days.
#[tokio::test]
async fn an_overflowing_delay_is_a_400() {
    let app = start(|_| {}).await;
    for delay in [
        "18446744073709551615s1s",
        "99999999999999999d99999999999999999d",
    ] {
        let res = app
            .post_json("/trigger", &json!({"event": "audit.noted", "delay": delay}))
            .await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.text);
        assert!(res.error().contains("365 days"), "{}", res.text);
    }
}

/// Found by `trigger_fuzz`: a JSON array was read as the fields in order (`["a"]` sent event
/// `a`); the body must be an object, and a repeated field is still refused.
#[tokio::test]
async fn an_array_body_is_a_400() {
    let app = start(|_| {}).await;
    for body in [json!(["audit.noted"]), json!(["audit.noted", {"x": 1}])] {
        let res = app.post_json("/trigger", &body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.text);
        assert!(
            res.error().contains("must be a JSON object"),
            "{}",
            res.text
        );
    }
    let repeated = app
        .call(raw_post(
            Some("application/json"),
            r#"{"event": "audit.noted", "event": "user.created"}"#,
        ))
        .await;
    assert_eq!(
        repeated.status,
        StatusCode::BAD_REQUEST,
        "{}",
        repeated.text
    );
    assert!(
        repeated.error().contains("duplicate field"),
        "{}",
        repeated.text
    );
}
