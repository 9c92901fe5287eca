//! The addresses Flare refuses to call endpoints at (`flare::endpoints::address`) and what it
//! quotes of their answers, through every way an endpoint comes in: the JSON API, the Trigger.dev
//! v2 registration, a registry allowing more (`--endpoint-allow`), and an endpoint stored while
//! it was allowed. (Endpoints given at start: `config.rs`'s tests; the dashboard form:
//! `tests/dashboard.rs`; names resolving to refused addresses: `endpoints/caller.rs`'s tests.)
//! The rules do not depend on the store, so this runs on SQLite only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use flare::endpoints::address::AllowList;
use flare::endpoints::{Error as EndpointError, Registry};
use serde_json::{json, Value};
use support::{Backend, TestDb};
use tower::ServiceExt;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const KEY: &str = "an-api-key-long-enough";

/// An answer: status, content type, body.
type Answer = (StatusCode, &'static str, Vec<u8>);

/// A server answering every request with the answer currently set; its URL.
async fn answering(first: Answer) -> (String, Arc<Mutex<Answer>>) {
    let answer = Arc::new(Mutex::new(first));
    let current = Arc::clone(&answer);
    let router = axum::Router::new().fallback(move || {
        let (status, content_type, body) = current.lock().unwrap().clone();
        async move { (status, [("content-type", content_type)], body).into_response() }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/flare", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, answer)
}

/// `POST path` with the API key and a JSON body: the status and the `error` message.
async fn post(router: &axum::Router, path: &str, body: Value) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("host", "localhost")
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let res = router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body["error"].as_str().unwrap_or("").to_string())
}

#[tokio::test]
async fn link_local_metadata_and_unspecified_urls_are_a_clear_400() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (client, _clock) = db.client().await;
    let router = support::sample::router(&client, db.url.clone(), Some(KEY));
    for (url, says) in [
        (
            "http://169.254.169.254/latest/meta-data/iam/",
            "169.254.169.254 is a cloud metadata service",
        ),
        ("http://[fd00:ec2::254]/", "cloud metadata service"),
        (
            "http://metadata.google.internal/computeMetadata/v1/",
            "metadata.google.internal is a cloud metadata service",
        ),
        ("http://2852039166/", "169.254.169.254 is a cloud metadata"),
        ("http://169.254.10.1:4000/flare", "link-local"),
        ("http://[fe80::1]:4000/flare", "link-local"),
        ("http://0.0.0.0:4000/flare", "unspecified"),
    ] {
        // Flare's own registration and the Trigger.dev v2 CLI's alike.
        for (path, body) in [
            ("/api/endpoints", json!({"url": url, "secret": SECRET})),
            ("/api/v1/endpoints", json!({"url": url, "name": "app"})),
        ] {
            let (status, error) = post(&router, path, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {url}: {error}");
            assert!(
                error.contains(says) && error.contains("--endpoint-allow"),
                "{path} {url}: {error}"
            );
        }
    }
    assert!(client.store().endpoints_load().await.unwrap().is_empty());
    client.shutdown().await;
}

#[tokio::test]
async fn allowed_addresses_are_called_and_every_call_checks_again() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (client, _clock) = db.client().await;
    // An unscoped link-local address cannot be reached: allowed, the index fails trying; not
    // allowed, the URL is refused before any call.
    let link_local = "http://[fe80::1]:4000/flare";
    let allowed = Registry::with_allow(client.clone(), AllowList::parse(["fe80::/10"]).unwrap());
    let err = allowed
        .add(link_local, Some(SECRET.into()))
        .await
        .unwrap_err();
    assert!(matches!(err, EndpointError::Index { .. }), "{err}");
    assert!(err.to_string().contains("could not reach"), "{err}");
    let err = Registry::new(client.clone())
        .add(link_local, Some(SECRET.into()))
        .await
        .unwrap_err();
    assert!(matches!(err, EndpointError::Url { .. }), "{err}");

    // Stored by a node that allows it, the endpoint is not called by one that does not.
    allowed
        .start(vec![flare::config::EndpointSeed {
            url: link_local.into(),
            secret: SECRET.into(),
        }])
        .await
        .unwrap();
    allowed.stop();
    let id = flare::endpoints::endpoint_id(link_local);
    let err = Registry::new(client.clone())
        .reindex(&id)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("fe80::1 is a link-local address"),
        "{err}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn private_addresses_are_called() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (client, _clock) = db.client().await;
    let registry = Registry::new(client.clone());
    // 10/8 passes the check; what follows is the call (nothing listens there: unreachable or
    // timed out, never refused).
    let err = registry
        .add("http://10.255.255.1:9/flare", Some(SECRET.into()))
        .await
        .unwrap_err();
    assert!(matches!(err, EndpointError::Index { .. }), "{err}");
    assert!(!err.to_string().contains("--endpoint-allow"), "{err}");
    client.shutdown().await;
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_not_quoted() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (client, _clock) = db.client().await;
    let router = support::sample::router(&client, db.url.clone(), Some(KEY));
    let page = b"<html>admin console: password hunter2</html>".to_vec();
    let (url, answer) =
        answering((StatusCode::INTERNAL_SERVER_ERROR, "text/html", page.clone())).await;
    let add = json!({"url": url, "secret": SECRET});
    let (status, error) = post(&router, "/api/endpoints", add.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(error.ends_with("the endpoint answered HTTP 500"), "{error}");

    *answer.lock().unwrap() = (StatusCode::OK, "text/html", page);
    let (status, error) = post(&router, "/api/endpoints", add.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(
        error.contains("is not JSON") && error.contains("text/html"),
        "{error}"
    );
    assert!(
        !error.contains("hunter2") && !error.contains("admin"),
        "{error}"
    );

    // A JSON error says what went wrong: its message is quoted, nothing else of it.
    let json_error = json!({"error": "no signature matches", "debug": "hunter2"});
    *answer.lock().unwrap() = (
        StatusCode::UNAUTHORIZED,
        "application/json",
        json_error.to_string().into_bytes(),
    );
    let (status, error) = post(&router, "/api/endpoints", add).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(
        error.ends_with("the endpoint answered HTTP 401: no signature matches"),
        "{error}"
    );
    assert!(client.store().endpoints_load().await.unwrap().is_empty());
    client.shutdown().await;
}
