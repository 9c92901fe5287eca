//! Access control: the API key guards the protected group; webhooks and health stay open.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;

use crate::support::{start, TestApp};

const KEY: &str = "test-key-0123456789abcdef";

fn trigger(auth: Option<&str>) -> Request<Body> {
    let mut req = Request::post("/trigger").header("content-type", "application/json");
    if let Some(value) = auth {
        req = req.header("authorization", value);
    }
    req.body(Body::from(json!({"event": "a.b"}).to_string()))
        .expect("request")
}

async fn keyed() -> TestApp {
    start(|raw| raw.api_key = Some(KEY.into())).await
}

#[tokio::test]
async fn protected_routes_need_the_bearer_key() {
    let app = keyed().await;
    let bearer = format!("Bearer {KEY}");
    for (auth, want) in [
        (None, StatusCode::UNAUTHORIZED),
        (
            Some("Bearer wrong-key-0123456789abcdef"),
            StatusCode::UNAUTHORIZED,
        ),
        (Some(KEY), StatusCode::UNAUTHORIZED),
        (Some("Basic dGVzdDp0ZXN0"), StatusCode::UNAUTHORIZED),
        (Some(bearer.as_str()), StatusCode::OK),
    ] {
        let res = app.call(trigger(auth)).await;
        assert_eq!(res.status, want, "{auth:?}: {}", res.text);
        if want == StatusCode::UNAUTHORIZED {
            assert!(res.error().contains("API key"));
            assert_eq!(
                res.headers.get("www-authenticate").map(|v| v.as_bytes()),
                Some(&b"Bearer"[..])
            );
            assert!(!res.text.contains(KEY), "the key never appears in a body");
        }
    }
}

#[tokio::test]
async fn every_route_of_the_protected_group_is_covered() {
    let app = keyed().await;
    let routes = [
        ("POST", "/trigger"),
        ("POST", "/api/v1/events"),
        ("POST", "/api/v1/events/bulk"),
        ("GET", "/api/v1/events/x"),
        ("GET", "/api/v2/events/x"),
        ("POST", "/api/v1/events/x/cancel"),
        ("POST", "/e/not-the-key"),
    ];
    for (method, path) in routes {
        let res = app
            .call(
                Request::builder()
                    .method(method)
                    .uri(path)
                    .header("content-type", "application/json")
                    .body(Body::from("{}"))
                    .expect("request"),
            )
            .await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{method} {path}");
        res.error();
    }
}

#[tokio::test]
async fn webhooks_and_health_stay_open() {
    let app = keyed().await;
    for path in ["/healthz", "/readyz"] {
        let res = app
            .call(Request::get(path).body(Body::empty()).expect("request"))
            .await;
        assert_eq!(res.status, StatusCode::OK, "{path}");
    }
    for path in ["/webhooks/payments", "/webhooks/auth"] {
        let res = app
            .call(Request::post(path).body(Body::from("{}")).expect("request"))
            .await;
        // Not 401: the route is reached and answers about its own configuration.
        assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
    }
}

#[tokio::test]
async fn inngest_takes_the_key_from_its_path() {
    let app = keyed().await;
    let send = |path: String| {
        Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(json!({"name": "a.b", "data": {}}).to_string()))
            .expect("request")
    };
    let ok = app.call(send(format!("/e/{KEY}"))).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    let wrong = app.call(send("/e/wrong-key-0123456789abcdef".into())).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(!wrong.text.contains("wrong-key"), "{}", wrong.text);
    // A Bearer header works there too.
    let mut with_header = send("/e/anything".into());
    with_header.headers_mut().insert(
        "authorization",
        format!("Bearer {KEY}").parse().expect("hv"),
    );
    assert_eq!(app.call(with_header).await.status, StatusCode::OK);
}

#[tokio::test]
async fn without_a_configured_key_everything_is_open() {
    let app = start(|_| {}).await;
    assert_eq!(app.call(trigger(None)).await.status, StatusCode::OK);
    let res = app
        .post_json("/e/any-key-at-all", &json!({"name": "a.b"}))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
}
