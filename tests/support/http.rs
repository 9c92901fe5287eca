//! One request through a router without a socket (`oneshot`), as the suites that drive
//! `flare::http::app` send it: [`call`] fills in the `Host` an HTTP/1.1 client always sends and
//! reads the whole answer into an [`Answer`]; [`json_request`] makes the usual request.

use axum::body::Body;
use axum::http::header::HOST;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;

/// The `Host` [`call`] sends when a request names none, as every HTTP/1.1 client would: a loopback
/// name, which Flare without an API key requires (see `flare::http::guard`).
pub const LOOPBACK_HOST: &str = "127.0.0.1:3000";

/// An answer: status, headers and the body, as text and parsed as JSON (`Value::Null` when it is
/// not JSON).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Answer {
    /// The `error` message of an error answer, asserting the body is JSON `{"error": string}`.
    pub fn error(&self) -> &str {
        assert_eq!(
            self.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "error answers are JSON: {}",
            self.text
        );
        self.json["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message in {}", self.text))
    }
}

/// `method uri` with `body` as JSON (and its content type), or without a body.
pub fn json_request(method: &str, uri: &str, body: Option<Value>) -> Request<Body> {
    let req = Request::builder().method(method).uri(uri);
    match body {
        Some(v) => req
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => req.body(Body::empty()),
    }
    .expect("request")
}

/// Sends `req` through `router` (with `Host: 127.0.0.1:3000` unless it names a host).
pub async fn call(router: &Router, mut req: Request<Body>) -> Answer {
    if !req.headers().contains_key(HOST) {
        req.headers_mut()
            .insert(HOST, HeaderValue::from_static(LOOPBACK_HOST));
    }
    let res = router.clone().oneshot(req).await.expect("infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        text,
        json,
    }
}
