//! Storage failures are logged in summary. During an outage every operation fails alike (a full
//! disk once wrote 32,881 ERROR lines in 20 s, a PostgreSQL outage 3,230 in 17 s, each failed
//! `/readyz` poll a WARN line); now each place that logs a storage failure writes its first line,
//! then one per 10 s with the count held back (`flare::log_throttle::storage_failure`).
//!
//! Storage goes down through the test hook (`Store::set_read_only`: writes are refused) while an
//! engine with jobs claims and maintains, a client sends, and the HTTP app answers `/trigger` and
//! `/readyz`. Every WARN and ERROR line is captured by a process-wide subscriber (the SQLite
//! writer logs from a thread of its own), and the throttle's clock is a `ManualClock`, so the
//! test moves past the interval instead of sleeping. Its own binary: the subscriber and the
//! throttle are the process's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flare::ManualClock;
use serde_json::json;
use support::{http, sample, Backend, TestDb};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// A WARN or ERROR line: where it came from, what it says, and the count it reports.
#[derive(Debug, Clone)]
struct Line {
    target: String,
    message: String,
    suppressed: Option<u64>,
}

static LINES: Mutex<Vec<Line>> = Mutex::new(Vec::new());

/// Keeps every WARN and ERROR event in [`LINES`].
struct Capture;

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() > tracing::Level::WARN {
            return;
        }
        #[derive(Default)]
        struct Fields {
            message: String,
            suppressed: Option<u64>,
        }
        impl Visit for Fields {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.message = format!("{value:?}");
                }
            }
            fn record_u64(&mut self, field: &Field, value: u64) {
                if field.name() == "suppressed" {
                    self.suppressed = Some(value);
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        LINES.lock().unwrap().push(Line {
            target: event.metadata().target().to_string(),
            message: fields.message,
            suppressed: fields.suppressed,
        });
    }
}

/// The throttle's clock, shared by the tests of this binary (the throttle remembers times).
fn clock() -> &'static ManualClock {
    static CLOCK: OnceLock<ManualClock> = OnceLock::new();
    CLOCK.get_or_init(|| {
        tracing_subscriber::registry().with(Capture).init();
        let clock = ManualClock::new(1_000_000_000);
        flare::log_throttle::set_storage_clock(Arc::new(clock.clone()));
        clock
    })
}

/// One outage at a time: the capture and the throttle are the process's.
static OUTAGES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The lines captured since `mark`, counted by message.
fn lines_since(mark: usize) -> (Vec<Line>, BTreeMap<String, usize>) {
    let lines = LINES.lock().unwrap()[mark..].to_vec();
    let mut counts = BTreeMap::new();
    for l in &lines {
        *counts
            .entry(format!("{}: {}", l.target, l.message))
            .or_default() += 1;
    }
    (lines, counts)
}

async fn status(app: &axum::Router, method: &str, uri: &str, body: Option<&str>) -> StatusCode {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    http::call(app, req).await.status
}

/// How many of each failure the outage makes within one interval.
const FAILURES: usize = 200;

/// The store's own line when it refuses writes.
fn store_line(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "cannot begin a write transaction",
        Backend::Postgres => "inserting a batch of events failed; every sender gets the error",
    }
}

/// Fails every kind of storage write many times within one interval of the throttle, then once
/// more after it.
async fn an_outage_logs_each_failure_once_then_a_summary(db: TestDb) {
    let _alone = OUTAGES.lock().await;
    let clock = clock();
    // Whatever earlier tests logged is a full interval ago.
    clock.advance(Duration::from_secs(60));
    let (client, _) = db.client().await;
    sample::define_jobs(&client);
    // The definitions are stored in the background: before the outage.
    support::wait_for("the job definitions to be stored", || async {
        let jobs = client.store().jobs_list(chrono::Utc::now()).await.ok()?;
        (jobs.len() == 3).then_some(())
    })
    .await;
    let app = sample::router(&client, db.url.clone(), None);
    client
        .send_event("user.created", &json!({"email": "before@example.com"}))
        .await
        .expect("a send before the outage");
    let mark = LINES.lock().unwrap().len();
    client
        .store()
        .health_fail_writes(true)
        .await
        .expect("read-only");
    for n in 0..FAILURES {
        assert!(client
            .send_event("user.created", &json!({"n": n}))
            .await
            .is_err());
        let body = format!(r#"{{"event": "user.created", "payload": {{"n": {n}}}}}"#);
        assert_eq!(
            status(&app, "POST", "/trigger", Some(&body)).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(&app, "GET", "/readyz", None).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    // The engine's claims, heartbeats and chores meet the outage too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (first, counts) = lines_since(mark);
    eprintln!("{:?}: {counts:#?}", db.backend);
    assert!(
        counts.values().all(|&n| n == 1),
        "{FAILURES} sends, requests and polls failed within one interval: one line each, not {counts:#?}"
    );
    let readyz = first
        .iter()
        .filter(|l| l.message.starts_with("not ready"))
        .count();
    assert_eq!(readyz, 1, "{first:#?}");
    assert!(
        first
            .iter()
            .any(|l| l.message == "storage failure; requests answer 503"),
        "{first:#?}"
    );
    assert!(
        first.iter().any(|l| l.message == store_line(db.backend)),
        "the store's own line: {first:#?}"
    );

    // An interval later the next failure of each kind writes a line with the count held back.
    clock.advance(Duration::from_secs(10));
    let mark = LINES.lock().unwrap().len();
    assert!(client.send_event("user.created", &json!({})).await.is_err());
    let body = r#"{"event": "user.created", "payload": {}}"#;
    assert_eq!(
        status(&app, "POST", "/trigger", Some(body)).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        status(&app, "GET", "/readyz", None).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (summaries, counts) = lines_since(mark);
    eprintln!("{:?} after the interval: {summaries:#?}", db.backend);
    assert!(counts.values().all(|&n| n == 1), "{counts:#?}");
    let readyz = summaries
        .iter()
        .find(|l| l.message.starts_with("not ready"))
        .expect("a readiness line after the interval");
    assert_eq!(
        readyz.suppressed,
        Some(FAILURES as u64 - 1),
        "the polls held back: {readyz:?}"
    );
    let http = summaries
        .iter()
        .find(|l| l.message == "storage failure; requests answer 503")
        .expect("the HTTP layer's line after the interval");
    assert_eq!(
        http.suppressed,
        Some(FAILURES as u64 - 1),
        "the failed requests held back: {http:?}"
    );
    let store = summaries
        .iter()
        .find(|l| l.message == store_line(db.backend))
        .expect("the store's line after the interval");
    // Sends are written in batches, so fewer failures than sends; the engine's writes add some.
    assert!(store.suppressed > Some(0), "{store:?}");

    client
        .store()
        .health_fail_writes(false)
        .await
        .expect("writable");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_outage_logs_each_failure_once_then_a_summary() {
    let db = TestDb::new(Backend::Sqlite).await;
    an_outage_logs_each_failure_once_then_a_summary(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_outage_logs_each_failure_once_then_a_summary() {
    if let Some(db) = TestDb::new_or_skip(Backend::Postgres).await {
        an_outage_logs_each_failure_once_then_a_summary(db).await;
    }
}
