//! The suite's application: a temp database, a client on a manual clock with the reference jobs,
//! and the router over it; requests go through `support::http::call`.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use flare::config::{RawServe, ServeConfig};
use flare::http::{app, AppState};
use flare::{Client, ManualClock, RunStatus};
use serde_json::Value;

use crate::support::db::client_at;
use crate::support::http::{call, Answer};
use crate::support::server::settings;

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
    let mut raw = settings(db_url);
    edit(&mut raw);
    raw.validate().expect("valid test configuration")
}

/// Starts a client (with the reference jobs) on a manual clock and builds the router.
pub async fn start(edit: impl FnOnce(&mut RawServe)) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/flare.db", dir.path().display());
    let config = config(&url, edit);
    let (client, clock) = client_at(&url, START_MS).await;
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
