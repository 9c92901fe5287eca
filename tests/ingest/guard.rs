//! The browser guards of `flare::http::guard`, probed as a hostile web page would: DNS rebinding
//! (another `Host`) without an API key, and cross-site "simple" POSTs that need no CORS preflight.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::webhooks::stripe;
use serde_json::json;
use tower::ServiceExt;

use crate::app::{start, TestApp, START_MS};
use crate::support::http::{call, Answer};

const KEY: &str = "guard-test-key-0123456789";
const STRIPE_SECRET: &str = "whsec_test_stripe_secret_0123456789";
/// An Inngest event as a `text/plain` form body: what a page can post without a preflight.
const EVENT: &str = r#"{"name": "user.created", "data": {"userId": "u1"}}"#;

/// `method path` with `Host: host` and the extra headers.
async fn send(
    app: &TestApp,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    app.call(req.body(Body::from(body.to_string())).expect("request"))
        .await
}

/// Events stored, less those Flare sent itself (`flare/run.failed` of a sample run).
async fn event_count(app: &TestApp) -> usize {
    app.client
        .store()
        .events_list(flare::store::query::EventQuery {
            limit: 500,
            ..Default::default()
        })
        .await
        .expect("list")
        .items
        .iter()
        .filter(|e| e.event.source != "flare")
        .count()
}

#[tokio::test]
async fn without_a_key_only_loopback_names_are_served() {
    let app = start(|_| {}).await;
    for path in ["/api/events", "/", "/nope"] {
        let a = send(&app, "GET", path, "evil.example", &[], "").await;
        assert_eq!(
            a.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{path}: {}",
            a.text
        );
        let error = a.error();
        assert!(
            error.contains("\"evil.example\" is not a loopback name")
                && error.contains("FLARE_API_KEY"),
            "{error}"
        );
    }
    for host in [
        "evil.example:3000",
        "localhost.evil.example",
        "127.0.0.1.evil.example",
        "0.0.0.0:3000",
        "192.168.1.10:3000",
    ] {
        let a = send(&app, "GET", "/api/events", host, &[], "").await;
        assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{host}");
    }
    // A rebound page cannot write either, and nothing is stored.
    let a = send(&app, "POST", "/e/key", "evil.example", &[], EVENT).await;
    assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(event_count(&app).await, 0);
    // No Host at all (every HTTP/1.1 client sends one): refused too.
    let bare = Request::get("/api/events")
        .body(Body::empty())
        .expect("request");
    let res = app.router.clone().oneshot(bare).await.expect("infallible");
    assert_eq!(res.status(), StatusCode::MISDIRECTED_REQUEST);

    for host in [
        "localhost",
        "localhost:3000",
        "LocalHost:3000",
        "app.localhost",
        "app.localhost:3000",
        "127.0.0.1:3000",
        "127.0.0.2",
        "[::1]:3000",
        "[::1]",
    ] {
        let a = send(&app, "GET", "/api/events", host, &[], "").await;
        assert_eq!(a.status, StatusCode::OK, "{host}: {}", a.text);
        let page = send(&app, "GET", "/", host, &[], "").await;
        assert_eq!(page.status, StatusCode::OK, "{host}: {}", page.text);
    }
    // The health routes answer under any name.
    let a = send(&app, "GET", "/healthz", "evil.example", &[], "").await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn with_a_key_any_name_is_served_and_the_key_protects() {
    let app = start(|raw| raw.api_key = Some(KEY.into())).await;
    let bearer = format!("Bearer {KEY}");
    let a = send(
        &app,
        "GET",
        "/api/events",
        "evil.example",
        &[("authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let a = send(&app, "GET", "/api/events", "flare.example.com", &[], "").await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text);

    // Without its key the same app refuses the name.
    let open = start(|_| {}).await;
    let a = send(&open, "GET", "/api/events", "flare.example.com", &[], "").await;
    assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{}", a.text);
}

#[tokio::test]
async fn cross_site_text_plain_posts_store_nothing() {
    let app = start(|_| {}).await;
    let plain = ("content-type", "text/plain;charset=UTF-8");
    let cross_site: [&[(&str, &str)]; 5] = [
        &[plain, ("origin", "http://evil.example")],
        &[plain, ("origin", "null")],
        &[plain, ("origin", "http://127.0.0.1:3001")],
        &[plain, ("sec-fetch-site", "cross-site")],
        &[
            plain,
            ("sec-fetch-site", "same-site"),
            ("origin", "http://app.localhost:3000"),
        ],
    ];
    for headers in cross_site {
        for path in ["/e/key", "/trigger"] {
            let body = if path == "/trigger" {
                r#"{"event": "user.created", "payload": {"userId": "u1"}}"#
            } else {
                EVENT
            };
            let a = send(&app, "POST", path, "127.0.0.1:3000", headers, body).await;
            assert_eq!(
                a.status,
                StatusCode::FORBIDDEN,
                "{path} {headers:?}: {}",
                a.text
            );
            assert!(a.error().contains("refused"), "{}", a.error());
        }
    }
    assert_eq!(event_count(&app).await, 0, "nothing was stored");

    // The same post from this origin, or without any browser header (curl), is stored.
    let same = [
        plain,
        ("origin", "http://127.0.0.1:3000"),
        ("sec-fetch-site", "same-origin"),
    ];
    let a = send(&app, "POST", "/e/key", "127.0.0.1:3000", &same, EVENT).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let a = send(&app, "POST", "/e/key", "localhost:3000", &[plain], EVENT).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let trigger = json!({"event": "user.created", "payload": {"userId": "u2"}});
    let a = app.post_json("/trigger", &trigger).await;
    assert!(a.status.is_success(), "{}", a.text);
    assert_eq!(event_count(&app).await, 3);
}

#[tokio::test]
async fn every_state_changing_route_but_the_webhooks_refuses_other_sites() {
    let app = start(|raw| raw.stripe_secrets = Some(STRIPE_SECRET.into())).await;
    let evil = [
        ("content-type", "application/json"),
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    for (method, path) in [
        ("POST", "/api/v1/events"),
        ("POST", "/api/v1/events/bulk"),
        ("POST", "/api/v1/events/x/cancel"),
        ("POST", "/api/events/x/replay"),
        ("POST", "/api/events/x/cancel"),
        ("POST", "/api/runs/x/retry"),
        ("POST", "/api/endpoints"),
        ("DELETE", "/api/endpoints/x"),
        ("POST", "/api/endpoints/x/index"),
    ] {
        let a = send(&app, method, path, "127.0.0.1:3000", &evil, "{}").await;
        assert_eq!(
            a.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            a.text
        );
    }
    // Reads are not state changes: a cross-site GET is answered (the browser keeps it from the
    // page without CORS headers).
    let a = send(&app, "GET", "/api/events", "127.0.0.1:3000", &evil, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);

    // A webhook's sender is a server, authenticated by its signature: no origin rule.
    let body = br#"{"id":"evt_guard","type":"payment_intent.succeeded","created":1,"data":{"object":{"id":"pi_1","amount":100,"currency":"usd"}}}"#;
    let signature = stripe::sign(STRIPE_SECRET, START_MS / 1000, body);
    let mut req = Request::post("/webhooks/payments").header("stripe-signature", signature);
    for (name, value) in evil {
        req = req.header(name, value);
    }
    let a = call(
        &app.router,
        req.body(Body::from(body.to_vec())).expect("request"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
}

#[tokio::test]
async fn two_host_headers_are_refused() {
    for key in [None, Some(KEY)] {
        let app = start(|raw| raw.api_key = key.map(str::to_string)).await;
        let bearer = format!("Bearer {KEY}");
        let auth: &[(&str, &str)] = if key.is_some() {
            &[("authorization", &bearer)]
        } else {
            &[]
        };
        for (path, method, body) in [
            ("/api/events", "GET", ""),
            ("/", "GET", ""),
            ("/e/key", "POST", EVENT),
            ("/healthz", "GET", ""),
        ] {
            let mut headers = auth.to_vec();
            headers.push(("host", "evil.example"));
            let a = send(&app, method, path, "localhost", &headers, body).await;
            assert_eq!(
                a.status,
                StatusCode::BAD_REQUEST,
                "{key:?} {path}: {}",
                a.text
            );
            assert!(
                a.error().contains("more than one Host header"),
                "{}",
                a.text
            );
            // Once is fine.
            let a = send(&app, "GET", "/healthz", "localhost", auth, "").await;
            assert_eq!(a.status, StatusCode::OK);
        }
        assert_eq!(event_count(&app).await, 0, "nothing stored");
    }
}
