//! Trigger.dev v2 and Inngest ingest, over plain HTTP (the real SDKs run in `tests/sdk_compat.rs`).

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::model::ms_to_time;
use serde_json::json;

use crate::app::{start, START_MS};

#[tokio::test]
async fn trigger_dev_send_answers_an_event_log() {
    let app = start(|_| {}).await;
    let res = app
        .post_json(
            "/api/v1/events",
            &json!({"event": {"name": "user.created", "payload": {"userId": "u1", "email": "a@b.c"},
                              "id": "td-1", "context": {"from": "sdk"}, "timestamp": "2020-01-01T00:00:00Z"}}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(
        res.json,
        json!({
            "id": "td-1", "name": "user.created", "payload": {"userId": "u1", "email": "a@b.c"},
            "context": {"from": "sdk"}, "timestamp": ms_to_time(START_MS),
            "deliverAt": null, "deliveredAt": ms_to_time(START_MS), "cancelledAt": null,
            "duplicate": false, "conflict": false,
        })
    );
    let stored = app
        .client
        .event("td-1")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.source, "trigger.dev");
    assert_eq!(stored.run_ids.len(), 2);
}

#[tokio::test]
async fn trigger_dev_delays_cancel_and_get() {
    let app = start(|_| {}).await;
    let later = app
        .post_json(
            "/api/v1/events",
            &json!({"event": {"name": "reminder.send", "payload": {}}, "options": {"deliverAfter": 3600}}),
        )
        .await;
    assert_eq!(later.status, StatusCode::OK, "{}", later.text);
    assert_eq!(
        later.json["deliverAt"],
        json!(ms_to_time(START_MS + 3_600_000))
    );
    assert_eq!(later.json["deliveredAt"], json!(null));
    let id = later.json["id"].as_str().expect("generated id").to_string();

    let at = app
        .post_json(
            "/api/v1/events",
            &json!({"event": {"name": "reminder.send"}, "options": {"deliverAt": "2030-01-01T06:00:00.000Z"}}),
        )
        .await;
    assert_eq!(
        at.json["deliverAt"],
        json!("2030-01-01T06:00:00Z"),
        "{}",
        at.text
    );

    let cancel = |id: &str| {
        Request::post(format!("/api/v1/events/{id}/cancel"))
            .header("content-type", "application/json")
            .body(Body::empty())
            .expect("request")
    };
    let cancelled = app.call(cancel(&id)).await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.text);
    assert_eq!(cancelled.json["cancelledAt"], json!(ms_to_time(START_MS)));
    let again = app.call(cancel(&id)).await;
    assert_eq!(again.status, StatusCode::OK, "cancelling twice is harmless");
    assert_eq!(again.json["cancelledAt"], cancelled.json["cancelledAt"]);

    app.clock.advance(Duration::from_secs(7200));
    app.client
        .engine()
        .maintenance()
        .schedule_once()
        .await
        .expect("schedule");
    let got = app
        .call(
            Request::get(format!("/api/v2/events/{id}"))
                .body(Body::empty())
                .expect("req"),
        )
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(
        got.json["runs"],
        json!([]),
        "a cancelled event starts nothing"
    );

    let now = app
        .post_json(
            "/api/v1/events",
            &json!({"event": {"name": "reminder.send", "id": "now-1", "payload": {"userId": "u1", "message": "hi"}}}),
        )
        .await;
    assert_eq!(now.status, StatusCode::OK);
    let run_id = app
        .client
        .event("now-1")
        .await
        .expect("read")
        .expect("event")
        .run_ids[0]
        .clone();
    assert_eq!(app.wait_run(&run_id).await, flare::RunStatus::Succeeded);
    let delivered = app.call(cancel("now-1")).await;
    assert_eq!(delivered.status, StatusCode::CONFLICT);
    assert!(delivered.error().contains("already delivered"));
    assert_eq!(
        app.call(cancel("missing")).await.status,
        StatusCode::NOT_FOUND
    );

    let got = app
        .call(
            Request::get("/api/v1/events/now-1")
                .body(Body::empty())
                .expect("req"),
        )
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.json["name"], json!("reminder.send"));
    assert_eq!(got.json["createdAt"], got.json["timestamp"]);
    let runs = got.json["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["jobId"], json!("send-reminder"));
    assert_eq!(runs[0]["status"], json!("SUCCESS"));
    assert!(runs[0]["completedAt"].is_string());
    let missing = app
        .call(
            Request::get("/api/v1/events/nope")
                .body(Body::empty())
                .expect("req"),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    missing.error();
}

#[tokio::test]
async fn trigger_dev_bulk_is_all_or_nothing() {
    let app = start(|_| {}).await;
    let res = app
        .post_json(
            "/api/v1/events/bulk",
            &json!({"events": [{"name": "a.one", "id": "b1"}, {"name": "a.two", "id": "b2"}]}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(res.json.as_array().expect("array").len(), 2);
    let bad = app
        .post_json(
            "/api/v1/events/bulk",
            &json!({"events": [{"name": "a.one", "id": "b3"}, {"name": "Bad Name"}]}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(app.client.event("b3").await.expect("read").is_none());
}

#[tokio::test]
async fn trigger_dev_bad_bodies_are_400() {
    let app = start(|_| {}).await;
    for body in [
        json!({}),
        json!({"event": {"payload": {}}}),
        json!({"event": {"name": "App/User.Created"}}),
        json!({"event": {"name": "a.b"}, "options": {"deliverAfter": -5}}),
        json!({"event": {"name": "a.b"}, "options": {"deliverAt": "soon"}}),
        // An array is not read as the fields in order.
        json!([{"name": "a.b", "payload": {}}]),
    ] {
        let res = app.post_json("/api/v1/events", &body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.text);
        res.error();
    }
    // Nor is a nested array (found by schemathesis: `"options": [null, null]` was taken).
    for body in [
        json!({"event": ["a.b", {}]}),
        json!({"event": {"name": "a.b"}, "options": [null, null]}),
    ] {
        let res = app.post_json("/api/v1/events", &body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.text);
        assert!(
            res.error().contains("expected a JSON object"),
            "{}",
            res.text
        );
    }
    for body in [
        json!([[{"name": "a.b"}]]),
        json!({"events": [["a.b"]]}),
        json!({"events": [], "options": [null, null]}),
        // The options are checked even when there is no event to apply them to.
        json!({"events": [], "options": {"deliverAfter": -1}}),
        json!({"events": [], "options": {"deliverAt": ""}}),
    ] {
        let bulk = app.post_json("/api/v1/events/bulk", &body).await;
        assert_eq!(
            bulk.status,
            StatusCode::BAD_REQUEST,
            "{body}: {}",
            bulk.text
        );
        bulk.error();
    }
    assert!(app
        .client
        .store()
        .events_list(flare::store::query::EventQuery {
            limit: 500,
            ..Default::default()
        })
        .await
        .expect("list")
        .items
        .is_empty());
    // Absent and null options are the same.
    let none = json!({"events": [], "options": null});
    let bulk = app.post_json("/api/v1/events/bulk", &none).await;
    assert_eq!(bulk.status, StatusCode::OK, "{}", bulk.text);
}

#[tokio::test]
async fn inngest_one_or_many_with_ids_and_ts() {
    let app = start(|_| {}).await;
    let one = app
        .post_json(
            "/e/key",
            &json!({"name": "user.created", "data": {"userId": "u1", "email": "a@b.c"}}),
        )
        .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text);
    assert_eq!(one.json["status"], json!(200));
    let id = one.json["ids"][0].as_str().expect("id");
    let stored = app.client.event(id).await.expect("read").expect("stored");
    assert_eq!(stored.payload["email"], json!("a@b.c"));
    assert_eq!(stored.source, "inngest");
    assert_eq!(stored.run_ids.len(), 2);

    let many = app
        .post_json(
            "/e/key",
            &json!([
                {"name": "a.one", "id": "inn-1", "user": {"id": "u9"}},
                {"name": "a.two", "ts": START_MS + 500},
                {"name": "a.three", "ts": START_MS + 3_600_000},
                {"name": "a.four", "ts": START_MS - 86_400_000},
            ]),
        )
        .await;
    assert_eq!(many.status, StatusCode::OK, "{}", many.text);
    let ids: Vec<String> = serde_json::from_value(many.json["ids"].clone()).expect("ids");
    assert_eq!(ids.len(), 4);
    assert_eq!(ids[0], "inn-1");
    let ev = |i: usize| {
        let id = ids[i].clone();
        let client = app.client.clone();
        async move { client.event(&id).await.expect("read").expect("stored") }
    };
    let first = ev(0).await;
    assert_eq!(first.payload, json!({}), "absent data is {{}}");
    assert_eq!(first.context, Some(json!({"user": {"id": "u9"}})));
    assert_eq!(
        ev(1).await.deliver_at,
        None,
        "a ts within the grace delivers at once"
    );
    assert_eq!(
        ev(2).await.deliver_at,
        Some(ms_to_time(START_MS + 3_600_000))
    );
    assert_eq!(ev(3).await.deliver_at, None, "a past ts delivers at once");

    let empty = app.post_json("/e/key", &json!([])).await;
    assert_eq!(empty.json, json!({"ids": [], "status": 200}));
}

#[tokio::test]
async fn inngest_retries_of_one_send_store_once() {
    let app = start(|_| {}).await;
    let send = || {
        Request::post("/e/key")
            .header("x-inngest-event-id-seed", "1893456000000,AAECAwQFBgcICQ==")
            // Inngest accepts JSON sent with any content type; so does Flare on this route.
            .header("content-type", "text/plain")
            .body(Body::from(
                json!([{"name": "user.created", "data": {"userId": "u", "email": "e"}}])
                    .to_string(),
            ))
            .expect("request")
    };
    let a = app.call(send()).await;
    let b = app.call(send()).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.json["ids"], b.json["ids"]);
    let id = a.json["ids"][0].as_str().expect("id");
    assert_eq!(
        app.client
            .event(id)
            .await
            .expect("read")
            .expect("event")
            .run_ids
            .len(),
        2
    );
    assert_eq!(
        app.client
            .store()
            .run_counts()
            .await
            .expect("counts")
            .values()
            .sum::<u64>(),
        2
    );
}

#[tokio::test]
async fn inngest_bad_events_refuse_the_whole_batch() {
    let app = start(|_| {}).await;
    for body in [
        json!([{"name": "ok.one", "id": "x1"}, {"data": {}}]),
        json!([{"name": "ok.one", "id": "x1"}, {"name": "App/User.Created"}]),
        json!([{"name": "ok.one", "id": "x1"}, {"name": "app//user.created"}]),
        json!([{"name": "ok.one", "id": "x1"}, {"name": "a.b", "ts": START_MS + 400 * 86_400_000_i64}]),
        json!("just a string"),
    ] {
        let res = app.post_json("/e/key", &body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.text);
        res.error();
    }
    assert!(app.client.event("x1").await.expect("read").is_none());
}

/// Inngest applications name events `<app>/<entity>.<action>`: such a name is stored as sent and
/// starts the jobs that trigger on it by that full name; each route's events carry its source.
#[tokio::test]
async fn inngest_app_prefixed_names_are_accepted_and_each_route_has_its_source() {
    let app = start(|_| {}).await;
    app.client
        .define_job(
            flare::Job::new("on-app-signup", "On app signup", "1.0.0")
                .trigger(flare::event_trigger("app/user.created"))
                .run(|_: serde_json::Value, _io: flare::Io| async move { Ok(json!("done")) }),
        )
        .expect("a job on an Inngest name");
    let res = app
        .post_json(
            "/e/key",
            &json!({"name": "app/user.created", "data": {"userId": "u1"}, "id": "inn-app-1"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let stored = app
        .client
        .event("inn-app-1")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.name, "app/user.created");
    assert_eq!(stored.source, "inngest");
    assert_eq!(stored.run_ids.len(), 1);
    assert_eq!(
        app.wait_run(&stored.run_ids[0]).await,
        flare::RunStatus::Succeeded
    );

    // The same name over the other routes, each with its own source, filterable.
    let td = app
        .post_json(
            "/api/v1/events",
            &json!({"event": {"name": "app/user.created", "payload": {}, "id": "td-app-1"}}),
        )
        .await;
    assert_eq!(td.status, StatusCode::OK, "{}", td.text);
    let plain = app
        .post_json(
            "/trigger",
            &json!({"event": "app/user.created", "id": "http-app-1"}),
        )
        .await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text);
    for (source, id) in [
        ("inngest", "inn-app-1"),
        ("trigger.dev", "td-app-1"),
        ("http", "http-app-1"),
    ] {
        let listed = app
            .call(
                Request::get(format!("/api/events?source={source}&name=app/user.created"))
                    .body(Body::empty())
                    .expect("request"),
            )
            .await;
        assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
        let ids: Vec<&str> = listed.json["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids, [id], "source={source}");
        assert_eq!(listed.json["events"][0]["source"], json!(source));
    }
}

/// An id sent again over the compatible routes answers the stored event and says so; a different
/// payload is flagged as a conflict.
#[tokio::test]
async fn resent_ids_say_duplicate_and_conflict_on_both_dialects() {
    let app = start(|_| {}).await;
    let td = |payload: serde_json::Value| json!({"event": {"name": "audit.noted", "payload": payload, "id": "td-dup"}});
    let first = app.post_json("/api/v1/events", &td(json!({"n": 1}))).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.json["duplicate"], json!(false));
    let same = app.post_json("/api/v1/events", &td(json!({"n": 1}))).await;
    assert_eq!(
        (&same.json["duplicate"], &same.json["conflict"]),
        (&json!(true), &json!(false))
    );
    let other = app.post_json("/api/v1/events", &td(json!({"n": 2}))).await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.text);
    assert_eq!(other.json["payload"], json!({"n": 1}), "the stored event");
    assert_eq!(other.json["conflict"], json!(true));
    assert_eq!(other.json["conflictingFields"], json!(["payload"]));

    let inn =
        |data: serde_json::Value| json!([{"name": "audit.noted", "data": data, "id": "inn-dup"}]);
    let first = app.post_json("/e/key", &inn(json!({"n": 1}))).await;
    assert_eq!(first.json, json!({"ids": ["inn-dup"], "status": 200}));
    let same = app.post_json("/e/key", &inn(json!({"n": 1}))).await;
    assert_eq!(
        same.json,
        json!({"ids": ["inn-dup"], "status": 200, "duplicates": ["inn-dup"]})
    );
    let other = app.post_json("/e/key", &inn(json!({"n": 2}))).await;
    assert_eq!(
        other.json["conflicts"],
        json!([{"id": "inn-dup", "conflictingFields": ["payload"]}])
    );
}

#[tokio::test]
async fn trigger_dev_v2_features_flare_lacks_answer_501_and_other_methods_405() {
    let app = start(|_| {}).await;
    let send = |method: &'static str, path: &'static str| {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .expect("request");
        app.call(req)
    };
    // The methods the SDK sends: a JSON 501 naming the feature.
    for (method, path, feature) in [
        ("PUT", "/api/v1/runs/r/statuses/s", "run status updates"),
        ("GET", "/api/v1/store/k", "key-value store"),
        ("PUT", "/api/v1/store/k", "key-value store"),
        ("DELETE", "/api/v1/store/k", "key-value store"),
        ("GET", "/api/v1/app/auth/github", "integration connections"),
        (
            "POST",
            "/api/v1/app/schedules/s/registrations",
            "dynamic schedules",
        ),
        (
            "DELETE",
            "/api/v1/app/schedules/s/registrations/k",
            "dynamic schedules",
        ),
        (
            "PUT",
            "/api/v2/app/triggers/t/registrations/k",
            "dynamic triggers",
        ),
    ] {
        let a = send(method, path).await;
        assert_eq!(a.status, StatusCode::NOT_IMPLEMENTED, "{method} {path}");
        assert!(a.error().contains(feature), "{method} {path}: {}", a.text);
    }
    // Any other method (TRACE included): 405 with the methods there are.
    for (method, path, allow) in [
        ("TRACE", "/api/v1/event-dispatchers/ephemeral", "POST"),
        ("TRACE", "/api/v1/store/k", "GET,HEAD,PUT,DELETE"),
        ("OPTIONS", "/api/v1/runs/r/statuses/s", "PUT"),
        ("POST", "/api/v1/app/auth/github", "GET,HEAD"),
        ("TRACE", "/api/v2/app/sources/s", "PUT"),
        ("GET", "/api/v1/webhooks/w", "PUT"),
    ] {
        let a = send(method, path).await;
        assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        let mut got: Vec<&str> = a.headers["allow"]
            .to_str()
            .expect("ascii")
            .split(',')
            .map(str::trim)
            .collect();
        let mut want: Vec<&str> = allow.split(',').collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{method} {path}");
        a.error();
    }
}
