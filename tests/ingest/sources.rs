//! Webhook sources (issue 29): every preset accepts a delivery signed by the provider's own
//! library (`fixtures/signatures/source_vectors.json`, made by `tests/webhook-vectors`) and
//! turns it into its events; forged, expired, replayed and duplicated deliveries store nothing
//! new on every scheme; the `/api/webhook-sources` API; unknown sources; test deliveries and
//! replays; sources deleted while deliveries arrive.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};

use crate::app::{start, TestApp, START_MS};
use crate::support::http::{json_request, Answer};

fn fixture(path: &str) -> Vec<u8> {
    let full = format!("{}/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn vectors() -> Vec<Value> {
    serde_json::from_slice::<Value>(&fixture("signatures/source_vectors.json"))
        .expect("vectors")
        .as_array()
        .expect("array")
        .clone()
}

async fn post(app: &TestApp, path: &str, body: &[u8], headers: &[(String, String)]) -> Answer {
    let mut req = Request::post(path).header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    app.call(req.body(Body::from(body.to_vec())).expect("request"))
        .await
}

async fn create(app: &TestApp, body: Value) -> Answer {
    app.call(json_request("POST", "/api/webhook-sources", Some(body)))
        .await
}

async fn event_names(app: &TestApp, answer: &Answer) -> Vec<String> {
    let mut names = Vec::new();
    for id in answer.json["eventIds"].as_array().expect("eventIds") {
        let event = app
            .client
            .event(id.as_str().expect("id"))
            .await
            .expect("read")
            .expect("stored");
        names.push(event.name);
    }
    names
}

async fn stored_events(app: &TestApp) -> usize {
    app.client
        .store()
        .webhook_deliveries_list(None, 1000)
        .await
        .expect("list")
        .iter()
        .map(|d| d.event_ids.len())
        .sum()
}

fn headers_of(vector: &Value) -> Vec<(String, String)> {
    vector["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_string()))
        .collect()
}

/// The source each vector's preset is tested with (the id names the standard-webhooks events).
fn source_for(vector: &Value) -> Value {
    let preset = vector["preset"].as_str().expect("preset");
    let id = if preset == "standard-webhooks" {
        "resend"
    } else {
        preset
    };
    json!({"id": id, "preset": preset, "secret": vector["secret"]})
}

#[tokio::test]
async fn every_preset_accepts_its_providers_own_signature() {
    let app = start(|_| {}).await;
    let expected: &[(&str, &[&str])] = &[
        ("github/issues.opened.json", &["github.issues.opened"]),
        ("github/push.json", &["github.push"]),
        ("github/ping.json", &[]),
        ("standard-webhooks/email.sent.json", &["resend.email.sent"]),
        (
            "paddle/transaction.completed.json",
            &["paddle.transaction.completed"],
        ),
        ("shopify/orders.create.json", &["shopify.orders.create"]),
        ("slack/app_mention.json", &["slack.app_mention"]),
        ("slack/url_verification.json", &[]),
    ];
    let mut created = Vec::new();
    for vector in vectors() {
        let source = source_for(&vector);
        let id = source["id"].as_str().expect("id").to_string();
        if !created.contains(&id) {
            let res = create(&app, source).await;
            assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
            assert!(!res
                .text
                .contains(vector["secret"].as_str().expect("secret")));
            created.push(id.clone());
        }
        let file = vector["file"].as_str().expect("file");
        app.clock.set(vector["now"].as_i64().expect("now") * 1000);
        let res = post(
            &app,
            &format!("/webhooks/{id}"),
            &fixture(file),
            &headers_of(&vector),
        )
        .await;
        assert_eq!(res.status, StatusCode::OK, "{file}: {}", res.text);
        let (_, names) = expected
            .iter()
            .find(|(f, _)| *f == file)
            .unwrap_or_else(|| panic!("no expectation for {file}"));
        match file {
            "github/ping.json" => assert_eq!(res.json["ping"], json!(true)),
            "slack/url_verification.json" => assert_eq!(
                res.json,
                json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
            ),
            _ => assert_eq!(event_names(&app, &res).await, *names, "{file}"),
        }
    }
    assert_eq!(created.len(), 5);
}

#[tokio::test]
async fn forged_expired_and_duplicated_deliveries_store_nothing_new() {
    let app = start(|_| {}).await;
    for vector in vectors() {
        let file = vector["file"].as_str().expect("file");
        if file.contains("ping") || file.contains("url_verification") {
            continue;
        }
        let source = source_for(&vector);
        let id = source["id"].as_str().expect("id").to_string();
        let _ = create(&app, source).await;
        let now_ms = vector["now"].as_i64().expect("now") * 1000;
        app.clock.set(now_ms);
        let path = format!("/webhooks/{id}");
        let body = fixture(file);
        let headers = headers_of(&vector);
        let before = stored_events(&app).await;

        // Forged: one byte of the body changed.
        let mut forged = body.clone();
        let last = forged.len() - 2;
        forged[last] ^= 0x01;
        let res = post(&app, &path, &forged, &headers).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{file}: {}", res.text);
        // Missing signature headers.
        let res = post(&app, &path, &body, &[]).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{file}");
        assert_eq!(stored_events(&app).await, before, "{file}");
        let rejected = app.state.webhooks.rejections(&id);
        assert!(rejected.len() >= 2, "{file}: {rejected:?}");

        // Expired, where the scheme signs a time (standard webhooks, paddle, slack).
        let stamped = ["standard-webhooks", "paddle", "slack"]
            .contains(&vector["preset"].as_str().expect("p"));
        if stamped {
            app.clock.set(now_ms + 301_000);
            let res = post(&app, &path, &body, &headers).await;
            assert_eq!(res.status, StatusCode::BAD_REQUEST, "{file}: {}", res.text);
            assert!(res.error().contains("tolerance"), "{}", res.error());
            assert_eq!(stored_events(&app).await, before, "{file}");
            app.clock.set(now_ms);
        }

        // Accepted once; the same delivery again (a provider retry or a replay) is a duplicate.
        let first = post(&app, &path, &body, &headers).await;
        assert_eq!(first.status, StatusCode::OK, "{file}: {}", first.text);
        assert_eq!(first.json["duplicate"], json!(false));
        let after = stored_events(&app).await;
        assert!(after > before, "{file}");
        let again = post(&app, &path, &body, &headers).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(again.json["duplicate"], json!(true), "{file}");
        assert_eq!(again.json["eventIds"], first.json["eventIds"]);
        assert_eq!(stored_events(&app).await, after, "{file}");
    }
    // The refusals are stored per source, with the reason.
    let res = app
        .call(json_request(
            "GET",
            "/api/webhook-sources/github/deliveries",
            None,
        ))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let reasons: Vec<&str> = res.json["rejections"]
        .as_array()
        .expect("rejections")
        .iter()
        .filter_map(|r| r["reason"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("no signature matches")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("x-hub-signature-256")),
        "{reasons:?}"
    );
    assert!(!res.json["deliveries"]
        .as_array()
        .expect("deliveries")
        .is_empty());
    // Every outcome is counted per source.
    let metrics = app.call(json_request("GET", "/metrics", None)).await;
    for outcome in ["rejected", "accepted", "duplicate"] {
        assert!(
            metrics
                .text
                .lines()
                .any(|l| l.starts_with("flare_webhook_deliveries_total{")
                    && l.contains("source=\"github\"")
                    && l.contains(&format!("outcome=\"{outcome}\""))),
            "{outcome}: {}",
            metrics.text
        );
    }
}

#[tokio::test]
async fn a_database_record_becomes_table_events_with_a_bearer_credential() {
    let app = start(|_| {}).await;
    let res = create(
        &app,
        json!({"id": "supabase", "preset": "database", "secret": "db-token-1"}),
    )
    .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    assert_eq!(res.json["scheme"], json!("bearer"));
    let body = fixture("database/orders.insert.json");
    let bearer = |t: &str| vec![("Authorization".to_string(), format!("Bearer {t}"))];
    let res = post(&app, "/webhooks/supabase", &body, &bearer("db-token-1")).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(event_names(&app, &res).await, ["orders.created"]);
    let event = app
        .client
        .event(res.json["eventIds"][0].as_str().expect("id"))
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        event.payload["record"]["id"],
        json!(1042),
        "the delivery body is the payload"
    );
    assert_eq!(event.source, "webhook:supabase");
    for wrong in [bearer("db-token-2"), vec![]] {
        let res = post(&app, "/webhooks/supabase", &body, &wrong).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.text);
    }
    let update = br#"{"type":"UPDATE","table":"orders","schema":"public","record":{"id":1042,"status":"paid"},"old_record":{"id":1042,"status":"pending"}}"#;
    let res = post(&app, "/webhooks/supabase", update, &bearer("db-token-1")).await;
    assert_eq!(event_names(&app, &res).await, ["orders.updated"]);
}

#[tokio::test]
async fn a_generic_hmac_source_uses_its_templates_and_rotated_secrets() {
    let app = start(|_| {}).await;
    let res = create(
        &app,
        json!({
            "id": "acme", "scheme": "hmac", "algorithm": "sha512", "header": "X-Acme-Signature",
            "encoding": "base64", "prefix": "v1=", "signedContent": "{timestamp}.{body}",
            "timestampHeader": "X-Acme-Timestamp", "toleranceSecs": 60,
            "eventName": "acme.{payload.type}", "deliveryId": "{header.x-acme-delivery}",
            "secret": ["new-secret", "old-secret"]
        }),
    )
    .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    assert_eq!(res.json["secrets"], json!(2));
    assert!(!res.text.contains("new-secret"));
    let body = br#"{"type":"Invoice.Paid","amount":5}"#;
    let t = START_MS / 1000;
    let sign = |secret: &str, t: i64| {
        use base64::Engine as _;
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha512>::new_from_slice(secret.as_bytes()).expect("key");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        format!(
            "v1={}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        )
    };
    let headers = |secret: &str, t: i64, id: &str| {
        vec![
            ("X-Acme-Signature".to_string(), sign(secret, t)),
            ("X-Acme-Timestamp".to_string(), t.to_string()),
            ("X-Acme-Delivery".to_string(), id.to_string()),
        ]
    };
    let res = post(
        &app,
        "/webhooks/acme",
        body,
        &headers("old-secret", t, "d1"),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(event_names(&app, &res).await, ["acme.invoice.paid"]);
    assert_eq!(res.json["eventIds"][0], json!("acme:d1:0"));
    let res = post(&app, "/webhooks/acme", body, &headers("other", t, "d2")).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    let res = post(
        &app,
        "/webhooks/acme",
        body,
        &headers("new-secret", t - 61, "d3"),
    )
    .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    assert!(res.error().contains("tolerance ±60 s"), "{}", res.error());
    // A body without the field the name needs says so.
    let res = post(&app, "/webhooks/acme", b"{}", &[]).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_api_answers_201_400_409_and_never_shows_a_secret() {
    let app = start(|raw| raw.stripe_secrets = Some("whsec_test".into())).await;
    let short = json!({"id": "github", "preset": "github", "secret": "gh-secret"});
    let res = create(&app, short.clone()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    assert_eq!(res.json["url"], json!("/webhooks/github"));
    assert_eq!(res.json["verified"], json!(true));
    assert!(!res.text.contains("gh-secret"));
    assert_eq!(create(&app, short).await.status, StatusCode::CONFLICT);
    let res = create(
        &app,
        json!({"id": "payments", "preset": "stripe", "secret": "x"}),
    )
    .await;
    assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.text);
    for (bad, needle) in [
        (json!({"id": "x", "preset": "github"}), "secret is required"),
        (
            json!({"id": "x", "scheme": "hmac", "secret": "s", "eventName": "e"}),
            "header",
        ),
        (json!({"preset": "github", "secret": "s"}), "id is required"),
        (
            json!({"id": "open", "eventName": "open.{payload.type}"}),
            "scheme (hmac, bearer, basic, or none",
        ),
    ] {
        let res = create(&app, bad.clone()).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(res.error().contains(needle), "{bad}: {}", res.error());
    }
    let res = app
        .call(json_request(
            "POST",
            "/api/webhook-sources",
            Some(json!([1])),
        ))
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    let res = create(
        &app,
        json!({"id": "open", "scheme": "none", "eventName": "open.{payload.type}"}),
    )
    .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    assert_eq!(res.json["verified"], json!(false));

    let list = app
        .call(json_request("GET", "/api/webhook-sources", None))
        .await;
    let ids: Vec<&str> = list.json["sources"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, ["payments", "auth", "github", "open"]);
    assert!(!list.text.contains("whsec_test") && !list.text.contains("gh-secret"));

    // An update keeps the secrets unless given; the id cannot change.
    let res = app
        .call(json_request(
            "PUT",
            "/api/webhook-sources/github",
            Some(json!({"preset": "github", "eventName": "gh.{header.x-github-event}"})),
        ))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(res.json["secrets"], json!(1));
    assert_eq!(res.json["eventName"], json!("gh.{header.x-github-event}"));
    let res = app
        .call(json_request(
            "PUT",
            "/api/webhook-sources/github",
            Some(json!({"id": "other", "preset": "github"})),
        ))
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    for method in ["PUT", "DELETE"] {
        let body = (method == "PUT").then(|| json!({"preset": "stripe"}));
        let res = app
            .call(json_request(method, "/api/webhook-sources/payments", body))
            .await;
        assert_eq!(res.status, StatusCode::CONFLICT, "{method}: {}", res.text);
        assert!(
            res.error().contains("STRIPE_WEBHOOK_SECRET"),
            "{}",
            res.error()
        );
    }
    let res = app
        .call(json_request("DELETE", "/api/webhook-sources/github", None))
        .await;
    assert_eq!(res.status, StatusCode::OK);
    let res = app
        .call(json_request("GET", "/api/webhook-sources/github", None))
        .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_unknown_source_is_a_404_like_any_unknown_route() {
    let app = start(|_| {}).await;
    let res = post(&app, "/webhooks/nope", b"{}", &[]).await;
    let route = post(&app, "/no/such/route", b"{}", &[]).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    assert_eq!(res.text, route.text);
    assert!(
        app.state.webhooks.rejections("nope").is_empty(),
        "nothing kept for it"
    );
}

#[tokio::test]
async fn a_test_delivery_and_a_replay_make_new_events() {
    let app = start(|_| {}).await;
    for source in [
        json!({"id": "github", "preset": "github", "secret": "s1"}),
        json!({"id": "shop", "preset": "shopify", "secret": "s2"}),
        json!({"id": "db", "preset": "database", "secret": "s3"}),
        json!({"id": "pay", "preset": "stripe", "secret": "whsec_s4"}),
        json!({"id": "paddle", "preset": "paddle", "secret": "s5"}),
        json!({"id": "slack", "preset": "slack", "secret": "s6"}),
        json!({"id": "resend", "preset": "standard-webhooks", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
        json!({"id": "acme", "scheme": "hmac", "header": "x-sig", "eventName": "acme.{payload.type}", "deliveryId": "{header.x-id}", "secret": "s7"}),
        json!({"id": "open", "scheme": "none", "eventName": "open.{payload.type}"}),
    ] {
        let id = source["id"].as_str().expect("id").to_string();
        assert_eq!(create(&app, source).await.status, StatusCode::CREATED);
        for _ in 0..2 {
            let res = app
                .call(json_request(
                    "POST",
                    &format!("/api/webhook-sources/{id}/test"),
                    None,
                ))
                .await;
            assert_eq!(res.status, StatusCode::OK, "{}", res.text);
            assert_eq!(res.json["status"], json!(200), "{id}: {}", res.text);
            assert_eq!(
                res.json["answer"]["duplicate"],
                json!(false),
                "{id}: each test is a new delivery"
            );
        }
    }
    let deliveries = app
        .client
        .store()
        .webhook_deliveries_list(Some("github"), 10)
        .await
        .expect("list");
    let delivery = &deliveries[0];
    let res = app
        .call(json_request(
            "POST",
            &format!(
                "/api/webhook-sources/github/deliveries/{}/replay",
                delivery.delivery_id
            ),
            None,
        ))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let replayed = res.json["eventIds"][0].as_str().expect("id");
    let event = app
        .client
        .event(replayed)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(event.name, "github.issues.opened");
    assert_eq!(event.source, format!("replay:{}", delivery.event_ids[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_deleted_while_deliveries_arrive_loses_none_that_were_acknowledged() {
    let app = start(|_| {}).await;
    assert_eq!(
        create(
            &app,
            json!({"id": "db", "preset": "database", "secret": "tok"})
        )
        .await
        .status,
        StatusCode::CREATED
    );
    let auth = vec![("Authorization".to_string(), "Bearer tok".to_string())];
    let mut tasks = Vec::new();
    for n in 0..40 {
        let body = format!(
            r#"{{"type":"INSERT","table":"orders","record":{{"id":{n}}},"old_record":null}}"#
        );
        let router = app.router.clone();
        let auth = auth.clone();
        tasks.push(tokio::spawn(async move {
            let mut req = Request::post("/webhooks/db").header("content-type", "application/json");
            for (k, v) in &auth {
                req = req.header(k.as_str(), v.as_str());
            }
            crate::support::http::call(&router, req.body(Body::from(body)).expect("req")).await
        }));
        if n < 10 {
            // The first ones are acknowledged before the delete starts.
            let res = tasks.pop().expect("task").await.expect("task");
            assert_eq!(res.status, StatusCode::OK, "{}", res.text);
            tasks.push(tokio::spawn(async move { res }));
        }
        if n == 25 {
            let res = app
                .call(json_request("DELETE", "/api/webhook-sources/db", None))
                .await;
            assert_eq!(res.status, StatusCode::OK);
        }
    }
    let mut acknowledged = 0;
    for task in tasks {
        let res = task.await.expect("task");
        if res.status == StatusCode::OK {
            acknowledged += 1;
            for id in res.json["eventIds"].as_array().expect("ids") {
                assert!(app
                    .client
                    .event(id.as_str().expect("id"))
                    .await
                    .expect("read")
                    .is_some());
            }
        } else {
            assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.text);
        }
    }
    assert!(acknowledged >= 10, "{acknowledged}");
    assert_eq!(stored_events(&app).await, acknowledged);
}

#[tokio::test]
async fn basic_and_unverified_sources() {
    let app = start(|_| {}).await;
    let res = create(
        &app,
        json!({"id": "legacy", "scheme": "basic", "secret": "hook:pa55", "eventName": "legacy.{payload.kind}", "deliveryId": "{payload.id}"}),
    )
    .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    let body = br#"{"kind":"ping","id":"p-1"}"#;
    let basic = |v: &str| vec![("Authorization".to_string(), format!("Basic {v}"))];
    // base64("hook:pa55") and base64("hook:wrong")
    let res = post(&app, "/webhooks/legacy", body, &basic("aG9vazpwYTU1")).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    assert_eq!(res.json["eventIds"], json!(["legacy:p-1:0"]));
    let res = post(&app, "/webhooks/legacy", body, &basic("aG9vazp3cm9uZw==")).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    assert!(res.error().contains("credential"), "{}", res.error());

    let res = create(
        &app,
        json!({"id": "open", "scheme": "none", "eventName": "open.{payload.kind}"}),
    )
    .await;
    assert_eq!(res.json["verified"], json!(false));
    let res = post(&app, "/webhooks/open", body, &[]).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let again = post(&app, "/webhooks/open", body, &[]).await;
    assert_eq!(
        again.json["duplicate"],
        json!(true),
        "the body's hash dedupes"
    );
}
