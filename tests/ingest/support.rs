//! Shared setup: a temp database, a client on a manual clock, the router, and a request helper.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::HOST;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::Router;
use flare::config::{RawServe, ServeConfig};
use flare::http::{app, AppState};
use flare::{Client, ManualClock, RunStatus};
use serde_json::Value;
use tower::ServiceExt;

/// 2030-01-01T00:00:00Z, in ms.
pub const START_MS: i64 = 1_893_456_000_000;

/// A running test application.
pub struct TestApp {
    pub _dir: tempfile::TempDir,
    pub client: Client,
    pub clock: ManualClock,
    pub state: AppState,
    pub router: Router,
}

/// A valid configuration on loopback with `edit` applied to the raw settings.
pub fn config(db_url: &str, edit: impl FnOnce(&mut RawServe)) -> ServeConfig {
    let mut raw = RawServe {
        listen: "127.0.0.1:0".into(),
        database_url: db_url.into(),
        concurrency: 4,
        retention_days: 0,
        lease_secs: 30,
        shutdown_grace_secs: 5,
        ..RawServe::default()
    };
    edit(&mut raw);
    raw.validate().expect("valid test configuration")
}

/// Starts a client (with the reference jobs) on a manual clock and builds the router.
pub async fn start(edit: impl FnOnce(&mut RawServe)) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/flare.db", dir.path().display());
    let config = config(&url, edit);
    let clock = ManualClock::new(START_MS);
    let client = Client::builder(&url)
        .clock(Arc::new(clock.clone()))
        .connect()
        .await
        .expect("connect");
    flare::reference_jobs::define_all(&client)
        .await
        .expect("reference jobs");
    let state = AppState::new(client.clone(), config);
    let router = app(state.clone());
    TestApp {
        _dir: dir,
        client,
        clock,
        state,
        router,
    }
}

/// An answer: status, headers and the body parsed as JSON (`Value::Null` when it is not JSON).
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

impl TestApp {
    /// Sends `req` through the router.
    pub async fn call(&self, req: Request<Body>) -> Answer {
        call(&self.router, req).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &Value) -> Answer {
        self.call(
            Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .expect("request"),
        )
        .await
    }

    /// Waits (bounded) until `run_id` reaches a terminal state and returns it.
    pub async fn wait_run(&self, run_id: &str) -> RunStatus {
        for _ in 0..500 {
            if let Some(detail) = self.client.store().run_detail(run_id).await.expect("read") {
                if detail.run.status.is_terminal() {
                    return detail.run.status;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {run_id} did not finish");
    }
}

/// The `Host` [`call`] sends when a request names none, as every HTTP/1.1 client would: a loopback
/// name, which Flare without an API key requires (see `flare::http::guard`).
pub const LOOPBACK_HOST: &str = "127.0.0.1:3000";

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
