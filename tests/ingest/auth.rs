//! Access control: the API key guards the protected group; webhooks and health stay open.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;

use crate::app::{start, TestApp};

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

/// `POST /trigger` with `auth` from the peer `peer` (as the server's `ConnectInfo` gives it) and
/// the given `X-Forwarded-For`.
fn trigger_from(peer: &str, auth: Option<&str>, forwarded: Option<&str>) -> Request<Body> {
    let mut req = trigger(auth);
    let addr: std::net::SocketAddr = peer.parse().expect("address");
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    if let Some(f) = forwarded {
        req.headers_mut()
            .insert("x-forwarded-for", f.parse().expect("header"));
    }
    req
}

const WRONG: &str = "Bearer wrong-key-0123456789abcdef";

/// Sends wrong keys from `peer` (with `forwarded`) until the client is locked out: each of the
/// first five is a 401, the lockout's first answer a 429.
async fn lock_out(app: &TestApp, peer: &str, forwarded: Option<&str>) {
    for n in 1..=5 {
        let res = app.call(trigger_from(peer, Some(WRONG), forwarded)).await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED, "wrong key {n}");
    }
    let res = app.call(trigger_from(peer, Some(WRONG), forwarded)).await;
    assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS, "{}", res.text);
}

#[tokio::test]
async fn wrong_bearer_keys_are_throttled_per_address() {
    let app = keyed().await;
    let a = "203.0.113.1:5000";
    lock_out(&app, a, None).await;
    let locked = app.call(trigger_from(a, Some(WRONG), None)).await;
    assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        locked.error().contains("too many wrong API keys"),
        "{}",
        locked.text
    );
    assert_eq!(
        locked.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"60"[..])
    );
    // Every protected route shares the count: a wrong key in the Inngest path too.
    let mut inngest = Request::post("/e/wrong-key-0123456789abcdef")
        .header("content-type", "application/json")
        .body(Body::from(json!({"name": "a.b"}).to_string()))
        .expect("request");
    inngest.extensions_mut().insert(axum::extract::ConnectInfo(
        a.parse::<std::net::SocketAddr>().expect("addr"),
    ));
    assert_eq!(
        app.call(inngest).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another port of the same host is the same client; another host is not.
    let same_host = app
        .call(trigger_from("203.0.113.1:6000", Some(WRONG), None))
        .await;
    assert_eq!(same_host.status, StatusCode::TOO_MANY_REQUESTS);
    let other = app
        .call(trigger_from("203.0.113.2:5000", Some(WRONG), None))
        .await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED);
    // The lockout lasts a minute of the server's clock.
    app.clock.advance(std::time::Duration::from_secs(59));
    let res = app.call(trigger_from(a, Some(WRONG), None)).await;
    assert_eq!(
        res.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    app.clock.advance(std::time::Duration::from_secs(1));
    let res = app.call(trigger_from(a, Some(WRONG), None)).await;
    assert_eq!(
        res.status,
        StatusCode::UNAUTHORIZED,
        "the minute has passed"
    );
}

#[tokio::test]
async fn a_right_key_goes_through_a_lockout() {
    let app = keyed().await;
    let a = "203.0.113.1:5000";
    lock_out(&app, a, None).await;
    let bearer = format!("Bearer {KEY}");
    let ok = app.call(trigger_from(a, Some(&bearer), None)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    let mut inngest = Request::post(format!("/e/{KEY}"))
        .header("content-type", "application/json")
        .body(Body::from(json!({"name": "a.b"}).to_string()))
        .expect("request");
    inngest.extensions_mut().insert(axum::extract::ConnectInfo(
        a.parse::<std::net::SocketAddr>().expect("addr"),
    ));
    assert_eq!(app.call(inngest).await.status, StatusCode::OK);
    // The right key does not clear the count: the guesser stays locked out.
    let wrong = app.call(trigger_from(a, Some(WRONG), None)).await;
    assert_eq!(wrong.status, StatusCode::TOO_MANY_REQUESTS);
    // No credential at all is not a guess: 401, never counted.
    let none = app.call(trigger_from(a, None, None)).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    let b = "203.0.113.9:5000";
    for _ in 0..20 {
        let none = app.call(trigger_from(b, None, None)).await;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    }
    let first_guess = app.call(trigger_from(b, Some(WRONG), None)).await;
    assert_eq!(first_guess.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn forwarded_for_is_ignored_without_trusted_proxies() {
    let app = keyed().await;
    let proxy = "10.0.0.5:40000";
    for n in 1..=5 {
        let forwarded = format!("198.51.100.{n}");
        let res = app
            .call(trigger_from(proxy, Some(WRONG), Some(&forwarded)))
            .await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED);
    }
    // Each guess named another client; all counted against the peer.
    let res = app
        .call(trigger_from(proxy, Some(WRONG), Some("198.51.100.77")))
        .await;
    assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS, "{}", res.text);
}

#[tokio::test]
async fn forwarded_for_names_the_client_behind_a_trusted_proxy() {
    let app = start(|raw| {
        raw.api_key = Some(KEY.into());
        raw.trusted_proxies = vec!["10.0.0.0/8".into()];
    })
    .await;
    let proxy = "10.0.0.5:40000";
    lock_out(&app, proxy, Some("203.0.113.1")).await;
    for (forwarded, want) in [
        // Another client behind the same proxy is not locked out.
        ("203.0.113.2", StatusCode::UNAUTHORIZED),
        // What the client wrote left of the proxy's entry does not change who it is.
        ("198.51.100.9, 203.0.113.1", StatusCode::TOO_MANY_REQUESTS),
        // Through a second trusted proxy, the same client.
        ("203.0.113.1, 10.0.0.7", StatusCode::TOO_MANY_REQUESTS),
    ] {
        let res = app
            .call(trigger_from(proxy, Some(WRONG), Some(forwarded)))
            .await;
        assert_eq!(res.status, want, "{forwarded}: {}", res.text);
    }
    // The locked-out client's right key is served.
    let bearer = format!("Bearer {KEY}");
    let ok = app
        .call(trigger_from(proxy, Some(&bearer), Some("203.0.113.1")))
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
}

#[tokio::test]
async fn a_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let app = start(|raw| {
        raw.api_key = Some(KEY.into());
        raw.trusted_proxies = vec!["10.0.0.0/8".into()];
    })
    .await;
    // A client reaching Flare directly claims to be others: its own address is counted.
    let direct = "198.51.100.7:5000";
    for n in 1..=5 {
        let claimed = format!("203.0.113.{n}");
        let res = app
            .call(trigger_from(direct, Some(WRONG), Some(&claimed)))
            .await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED);
    }
    let res = app
        .call(trigger_from(direct, Some(WRONG), Some("203.0.113.99")))
        .await;
    assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS, "{}", res.text);
    // The addresses it named were not locked out: through the proxy they are still clients.
    let res = app
        .call(trigger_from(
            "10.0.0.5:40000",
            Some(WRONG),
            Some("203.0.113.1"),
        ))
        .await;
    assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{}", res.text);
}

/// `POST /login` with `key` from `peer`, as a browser on this origin sends it.
fn login_from(peer: &str, key: &str) -> Request<Body> {
    let mut req = Request::post("/login")
        .header(
            "origin",
            format!("http://{}", crate::support::http::LOOPBACK_HOST),
        )
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("key={key}&next=%2F")))
        .expect("request");
    let addr: std::net::SocketAddr = peer.parse().expect("address");
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    req
}

/// The sign-in form and the API keys share one count per address: wrong Bearer keys lock out
/// the form's wrong keys too, and neither refuses the right key.
#[tokio::test]
async fn wrong_bearer_keys_and_sign_ins_share_one_count() {
    let app = keyed().await;
    let peer = "192.0.2.10:4000";
    lock_out(&app, peer, None).await;
    let wrong = app.call(login_from(peer, "nope")).await;
    assert_eq!(
        wrong.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        wrong.text
    );
    assert!(wrong.text.contains("Too many wrong keys"), "{}", wrong.text);
    let right = app.call(login_from(peer, KEY)).await;
    assert_eq!(right.status, StatusCode::SEE_OTHER, "{}", right.text);
    assert!(right.headers.get("set-cookie").is_some());

    // And the other way round: wrong sign-ins lock out wrong Bearer keys.
    let other = "192.0.2.11:4000";
    for _ in 0..5 {
        let res = app.call(login_from(other, "nope")).await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{}", res.text);
    }
    let res = app.call(trigger_from(other, Some(WRONG), None)).await;
    assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS, "{}", res.text);
    let bearer = format!("Bearer {KEY}");
    let res = app.call(trigger_from(other, Some(&bearer), None)).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
}
