//! Test support, one set for every suite. Each suite's crate root declares it (`mod support;`, or
//! `#[path = "../support/mod.rs"] mod support;` in a directory crate) and uses what it needs:
//!
//! - `db`: a fresh database per test on every backend ([`TestDb`]), with clients on a manual clock;
//! - `http`: one request through a router without a socket (`http::call`);
//! - `server`: `flare::server::run` on a loopback port the system picks (`server::Server`);
//! - `process`: the real binaries as child processes (`process::Proc`, `process::flare`);
//! - `endpoint_app`: a small HTTP job endpoint on a free port;
//! - `sample`: the sample jobs the HTTP suites define, and the router over a client;
//! - `skip`: a test that cannot run here says so where `cargo test` shows it (`SKIPPED …`), or
//!   fails under `CI`;
//! - here: engine settings for tests, a bounded wait for asynchronous outcomes, and
//!   `backend_tests!`, which turns each `async fn name(db: TestDb)` into one `#[tokio::test]` per
//!   backend, so every behaviour runs unchanged on each store.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use flare::{Client, EngineConfig};

pub mod db;
pub mod endpoint_app;
pub mod http;
pub mod process;
pub mod sample;
pub mod server;
pub mod skip;

#[allow(unused_imports)] // each suite uses some of them
pub use db::{pg_admin, pg_admin_url, with_database, Backend, KeptDb, TestDb};

/// Engine settings for tests: quick polling, no pruning unless asked.
pub fn test_config() -> EngineConfig {
    EngineConfig {
        concurrency: 16,
        poll_interval: Duration::from_millis(20),
        retention: None,
        shutdown_grace: Duration::from_secs(5),
        ..EngineConfig::default()
    }
}

/// Polls `check` until it returns `Some`, for at most 10 s of real time. For outcomes that happen
/// asynchronously (a run finishing), never for waiting out a delay: delays use the manual clock.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends one event through the store's batch insert (`Client::send_batch`) rather than the event
/// writer that `send_event` goes through; returns its id.
pub async fn insert_alone(client: &Client, name: &str, payload: &serde_json::Value) -> String {
    client
        .send_batch(
            vec![flare::SendEvent::new(name, payload)],
            flare::model::Source::Api,
        )
        .await
        .expect("send_batch")
        .remove(0)
        .event
        .id
}

/// Waits until every run of `event_id` is in a final state and returns the event's detail.
pub async fn settled(client: &Client, event_id: &str) -> flare::store::EventDetail {
    wait_for("the event's runs to finish", || async {
        let d = client
            .store()
            .event_detail(event_id)
            .await
            .expect("detail")?;
        d.runs.iter().all(|r| r.status.is_terminal()).then_some(d)
    })
    .await
}

/// Generates one test per backend for each named `async fn(TestDb)`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::support::TestDb::new($crate::support::Backend::Sqlite).await;
                    let kept = db.keep();
                    super::$name(db).await;
                    kept.assert_rollups_true().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(db) = $crate::support::TestDb::new_or_skip($crate::support::Backend::Postgres).await {
                        let kept = db.keep();
                        super::$name(db).await;
                        kept.assert_rollups_true().await;
                    }
                }
            )*
        }
    };
}
