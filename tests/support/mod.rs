//! Test support shared by the behaviour suites: a fresh database per test on every backend, a
//! client with a manual clock, and a bounded wait for asynchronous outcomes.
//!
//! `backend_tests!(name1, name2, …)` turns each `async fn name(db: TestDb)` into one `#[tokio::test]`
//! per backend, so every behaviour runs unchanged on each store.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flare::{Client, EngineConfig, ManualClock};

/// A store backend the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite in a temp dir.
    Sqlite,
}

/// A fresh, empty database for one test.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    /// The backend.
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A new empty database on `backend`.
    pub async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("flare.db").display());
                TestDb {
                    url,
                    backend,
                    _dir: Some(dir),
                }
            }
        }
    }

    /// A client with workers, a manual clock set to now, and test-friendly settings.
    pub async fn client(&self) -> (Client, ManualClock) {
        self.client_with(test_config()).await
    }

    /// A client with the given engine settings and a manual clock.
    pub async fn client_with(&self, config: EngineConfig) -> (Client, ManualClock) {
        let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
        let client = Client::builder(&self.url)
            .clock(Arc::new(clock.clone()))
            .config(config)
            .connect()
            .await
            .expect("connect");
        (client, clock)
    }

    /// A send-only client (no workers) sharing `clock`.
    pub async fn sender(&self, clock: &ManualClock) -> Client {
        Client::builder(&self.url)
            .clock(Arc::new(clock.clone()))
            .workers(false)
            .connect()
            .await
            .expect("connect")
    }
}

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
                    super::$name($crate::support::TestDb::new($crate::support::Backend::Sqlite).await).await;
                }
            )*
        }
    };
}
