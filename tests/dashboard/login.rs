//! Signing in: browsers without a credential go to the login page, the key traded for a session
//! cookie that logout and time end, where `next` may lead, and wrong keys locking a client out.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::http::auth::SESSION_TTL_MS;

use crate::fixture::{fixture, Answer, Auth, Fixture, HOST, KEY, ORIGIN};
use crate::support::http;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_without_a_credential_are_sent_to_login_and_the_api_stays_json() {
    let f = fixture().await;
    let a = f
        .request("GET", "/events?name=a.b", Auth::None, None, None)
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    assert_eq!(a.location(), "/login?next=%2Fevents%3Fname%3Da.b");
    let a = f
        .request("GET", "/api/events", Auth::None, None, None)
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert!(a.body.starts_with("{\"error\""));
    for open in ["/login", "/assets/dashboard.css", "/assets/dashboard.js"] {
        let a = f.request("GET", open, Auth::None, None, None).await;
        assert_eq!(a.status, StatusCode::OK, "{open}");
    }
    let a = f
        .request("GET", "/events", Auth::Cookie("forged.00"), None, None)
        .await;
    assert_eq!(
        a.status,
        StatusCode::SEE_OTHER,
        "a forged cookie is no credential"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_trades_the_key_for_a_session_that_logout_and_time_end() {
    let f = fixture().await;
    let wrong = f
        .request(
            "POST",
            "/login",
            Auth::None,
            Some(ORIGIN),
            Some("key=nope&next=%2F"),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get("set-cookie").is_none());
    assert!(wrong.body.contains("That is not the API key."));

    let a = f
        .request(
            "POST",
            "/login",
            Auth::None,
            Some(ORIGIN),
            Some(&format!("key={KEY}&next=%2Fruns")),
        )
        .await;
    let set = a
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("cookie");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"));
    assert!(!set.contains(KEY), "the cookie never holds the key");
    let cookie = f.login().await;
    let page = f
        .request("GET", "/events", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(page.status, StatusCode::OK);
    let api = f
        .request("GET", "/api/events", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(
        api.status,
        StatusCode::UNAUTHORIZED,
        "the JSON API wants the key"
    );
    // An open redirect is refused.
    let a = f
        .request(
            "POST",
            "/login",
            Auth::None,
            Some(ORIGIN),
            Some(&format!("key={KEY}&next=%2F%2Fevil.example")),
        )
        .await;
    assert_eq!(a.location(), "/");

    let out = f
        .request("POST", "/logout", Auth::Cookie(&cookie), Some(ORIGIN), None)
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/login");
    let cleared = out
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(cleared.contains("Max-Age=0"));
    let after = f
        .request("GET", "/events", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(after.status, StatusCode::SEE_OTHER, "logged out");

    let cookie = f.login().await;
    f.clock
        .advance(Duration::from_millis(SESSION_TTL_MS as u64 - 1_000));
    let ok = f
        .request("GET", "/jobs", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    f.clock.advance(Duration::from_secs(2));
    let expired = f
        .request("GET", "/jobs", Auth::Cookie(&cookie), None, None)
        .await;
    assert_eq!(expired.status, StatusCode::SEE_OTHER, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_login_next_only_goes_to_a_path_on_this_site() {
    let f = fixture().await;
    // `next` as the form sends it (URL-encoded) → where the sign-in redirects.
    for (next, expected) in [
        ("%2Fevents%3Fname%3Da", "/events?name=a"),
        ("%2F%09%2Fevil.com", "/"),
        ("%2F%2Fevil.com", "/"),
        ("//evil.com", "/"),
        ("%2F%5Cevil.com", "/"),
        ("%252F%252Fevil.com", "/"),
        ("%2F%0A%2Fevil.com", "/"),
        ("%2Fevents%0D%0ASet-Cookie%3A+x%3D1", "/"),
        ("https%3A%2F%2Fevil.com", "/"),
        ("%2F+%2Fevil.com", "/"),
        ("%2F%FF", "/"),
        ("%2F%00", "/"),
    ] {
        let a = f
            .request(
                "POST",
                "/login",
                Auth::None,
                Some(ORIGIN),
                Some(&format!("key={KEY}&next={next}")),
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{next}: {}", a.body);
        assert_eq!(a.location(), expected, "{next}");
        let form = f
            .request(
                "GET",
                &format!("/login?next={next}"),
                Auth::None,
                None,
                None,
            )
            .await;
        assert_eq!(form.status, StatusCode::OK, "{next}");
        let hidden = format!(r#"name="next" value="{expected}""#);
        assert!(form.body.contains(&hidden), "{next}: {}", form.body);
    }
}

/// `POST /login` with `key` from the peer `from` (as the server's `ConnectInfo` gives it).
async fn login_from(f: &Fixture, from: Option<&str>, key: &str) -> Answer {
    let mut req = Request::builder()
        .method("POST")
        .uri("/login")
        .header("host", HOST)
        .header("origin", ORIGIN)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(addr) = from {
        let addr: std::net::SocketAddr = addr.parse().expect("address");
        req = req.extension(axum::extract::ConnectInfo(addr));
    }
    let req = req
        .body(Body::from(format!("key={key}&next=%2Fruns")))
        .expect("request");
    http::call(&f.app, req).await.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_lock_a_client_out_for_a_minute() {
    let f = fixture().await;
    let a = Some("203.0.113.1:5000");
    for n in 1..=5 {
        let wrong = login_from(&f, a, "nope").await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "wrong key {n}");
    }
    // Locked: wrong keys get a 429 ...
    let locked = login_from(&f, a, "nope").await;
    assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        locked
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("60")
    );
    assert!(locked.headers.get("set-cookie").is_none());
    assert!(
        locked.body.contains("Too many wrong keys"),
        "{}",
        locked.body
    );
    // ... and the right key still signs in: whoever shares the address (a reverse proxy) with
    // a guesser is not locked out with it.
    let right = login_from(&f, a, KEY).await;
    assert_eq!(right.status, StatusCode::SEE_OTHER, "{}", right.body);
    assert!(right.headers.get("set-cookie").is_some());
    // Another port of the same host is the same client; another host is not.
    let same = login_from(&f, Some("203.0.113.1:5001"), "nope").await;
    assert_eq!(same.status, StatusCode::TOO_MANY_REQUESTS);
    let other = login_from(&f, Some("203.0.113.2:5000"), "nope").await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED);

    f.clock.advance(Duration::from_secs(30));
    let later = login_from(&f, a, "nope").await;
    assert_eq!(
        later
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("30")
    );
    f.clock.advance(Duration::from_secs(30));
    let after = login_from(&f, a, "nope").await;
    assert_eq!(
        after.status,
        StatusCode::UNAUTHORIZED,
        "the minute has passed"
    );

    // A right key does not clear the count (a guesser could otherwise ride on the requests of
    // a client holding the key): 4 wrong, right, 1 wrong locks.
    let b = Some("198.51.100.1:5000");
    for _ in 0..4 {
        assert_eq!(
            login_from(&f, b, "nope").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(login_from(&f, b, KEY).await.status, StatusCode::SEE_OTHER);
    assert_eq!(
        login_from(&f, b, "nope").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login_from(&f, b, "nope").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Without a peer address (the router driven in-process) all attempts share one count.
    for _ in 0..5 {
        login_from(&f, None, "nope").await;
    }
    assert_eq!(
        login_from(&f, None, "nope").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        login_from(&f, None, KEY).await.status,
        StatusCode::SEE_OTHER
    );
}
