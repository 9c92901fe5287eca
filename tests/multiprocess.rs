//! Multi-process test: one `flare serve` and three `flare worker` processes (the real binary) share
//! one database. 10,000 events arrive over HTTP (`POST /trigger`, concurrent); half-way one worker
//! is killed with SIGKILL. Afterwards every event's runs each have exactly one successful
//! completion, its chained event was sent exactly once, and nothing is left queued or running.
//!
//! Runs on SQLite (four processes on one file) and on PostgreSQL (a fresh database on
//! `FLARE_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`, dropped afterwards;
//! without a server the PostgreSQL test is skipped with the reason printed, unless `CI` is set).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flare::store::query::{EventQuery, RunQuery, MAX_LIMIT};
use flare::{Client, RunStatus};
use serde_json::json;
use support::process::{self, free_port, wait_healthy, Proc};
use support::{Backend, TestDb};
use tokio::task::JoinSet;

const EVENTS: usize = 10_000;
const SENDERS: usize = 32;

/// One scenario at a time: each starts four processes, and the box may have two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `flare` process with `args` on `db_url`, in `dir`, with 2 s leases and a 5 s grace period.
fn spawn(what: &str, args: &[&str], db_url: &str, dir: &std::path::Path) -> Proc {
    let mut command = process::flare(args);
    command
        .args(["--lease-secs", "2", "--shutdown-grace-secs", "5"])
        .env("DATABASE_URL", db_url)
        .current_dir(dir);
    Proc::spawn(what, command)
}

/// Every run, through the paginated list.
async fn all_runs(store: &flare::store::Store) -> Vec<flare::Run> {
    let mut runs = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .runs_list(RunQuery {
                limit: MAX_LIMIT,
                cursor,
                ..RunQuery::default()
            })
            .await
            .unwrap();
        runs.extend(page.items.into_iter().map(|r| r.run));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return runs,
        }
    }
}

/// Every event named `name`, through the paginated list.
async fn all_events(store: &flare::store::Store, name: &str) -> Vec<flare::StoredEvent> {
    let mut events = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .events_list(EventQuery {
                name: Some(name.to_string()),
                limit: MAX_LIMIT,
                cursor,
                ..EventQuery::default()
            })
            .await
            .unwrap();
        events.extend(page.items.into_iter().map(|e| e.event));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return events,
        }
    }
}

/// The whole scenario on the database at `db_url`; `dir` is the processes' working directory.
async fn one_server_three_workers_and_a_sigkill(db_url: &str, dir: &std::path::Path) {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = spawn("flare serve", &["serve", "--listen", &listen], db_url, dir);
    wait_healthy(port).await;
    let mut workers: Vec<Proc> = (0..3)
        .map(|i| {
            // `flare worker` runs the seed's jobs only when asked; `flare serve` runs them by default.
            let what = format!("flare worker {i}");
            spawn(&what, &["worker", "--demo"], db_url, dir)
        })
        .collect();

    let http = reqwest::Client::new();
    let url = format!("http://{listen}/trigger");
    let next = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(AtomicUsize::new(0));
    let mut senders = JoinSet::new();
    for _ in 0..SENDERS {
        let (http, url, next, acked) = (
            http.clone(),
            url.clone(),
            Arc::clone(&next),
            Arc::clone(&acked),
        );
        senders.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= EVENTS {
                    return;
                }
                let body = json!({
                    "event": "file.uploaded",
                    "id": format!("mp-{i}"),
                    "payload": {"fileId": format!("f{i}"), "filename": format!("f{i}.txt")},
                });
                let answer = http.post(&url).json(&body).send().await.expect("send");
                assert_eq!(answer.status(), 200, "event {i}: {:?}", answer.text().await);
                acked.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    // Half-way, one worker dies without a chance to clean up.
    while acked.load(Ordering::Relaxed) < EVENTS / 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "sending is too slow"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut killed = workers.remove(0);
    killed.child.kill().expect("SIGKILL");
    killed.child.wait().unwrap();
    while let Some(done) = senders.join_next().await {
        done.expect("sender");
    }
    let sent_in = started.elapsed();

    let observer = Client::builder(db_url)
        .workers(false)
        .connect()
        .await
        .unwrap();
    let store = observer.store().clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts = store.run_counts().await.unwrap();
        let open = counts.get(&RunStatus::Queued).copied().unwrap_or(0)
            + counts.get(&RunStatus::Running).copied().unwrap_or(0);
        // process-upload on each upload, notify-file-processed on each file.processed.
        let total: u64 = counts.values().sum();
        if open == 0 && total == 2 * EVENTS as u64 {
            assert_eq!(
                counts.get(&RunStatus::Succeeded).copied(),
                Some(2 * EVENTS as u64),
                "{counts:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "runs still open (queued or running) or missing: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done_in = started.elapsed();

    // Every event: one run, one chained event with one run; each run succeeded exactly once.
    let runs = all_runs(&store).await;
    assert_eq!(runs.len(), 2 * EVENTS);
    let mut upload_runs = HashSet::new();
    let mut upload_events = HashSet::new();
    let mut notified_events = HashSet::new();
    for run in &runs {
        assert_eq!(run.status, RunStatus::Succeeded, "run {}", run.id);
        match run.job_id.as_str() {
            "process-upload" => {
                upload_runs.insert(run.id.clone());
                assert!(
                    upload_events.insert(run.event_id.clone()),
                    "{}: one process-upload run",
                    run.event_id
                );
            }
            "notify-file-processed" => assert!(
                notified_events.insert(run.event_id.clone()),
                "{}: one notify run",
                run.event_id
            ),
            other => panic!("unexpected job {other}"),
        }
    }
    let expected: HashSet<String> = (0..EVENTS).map(|i| format!("mp-{i}")).collect();
    assert_eq!(upload_events, expected, "every acknowledged event ran");
    let processed = all_events(&store, "file.processed").await;
    assert_eq!(
        processed.len(),
        EVENTS,
        "file.processed sent once per upload"
    );
    let parents: HashSet<String> = processed
        .iter()
        .map(|e| e.parent_run_id.clone().expect("chained"))
        .collect();
    assert_eq!(parents, upload_runs, "one chained event per upload run");
    let processed_ids: HashSet<String> = processed.iter().map(|e| e.id.clone()).collect();
    assert_eq!(notified_events, processed_ids);
    // Attempt histories: every run that was claimed more than once (rescued after the kill or a
    // lost lease), and a sample of the others.
    let mut lost = 0;
    let mut checked = 0;
    for (i, run) in runs.iter().enumerate() {
        if run.attempt == 1 && i % 40 != 0 {
            continue;
        }
        let detail = store.run_detail(&run.id).await.unwrap().unwrap();
        let outcomes: Vec<&str> = detail.attempts.iter().map(|a| a.outcome.as_str()).collect();
        let successes = outcomes.iter().filter(|o| **o == "succeeded").count();
        assert_eq!(successes, 1, "run {}: {outcomes:?}", run.id);
        lost += outcomes.iter().filter(|o| **o == "lost").count();
        checked += 1;
    }
    eprintln!(
        "{EVENTS} events sent in {sent_in:?}, all runs done after {done_in:?}, checked in {:?}; \
         {checked} attempt histories read, attempts lost (the killed worker's, or leases lost under load) and rescued: {lost}",
        started.elapsed() - done_in
    );

    for w in workers {
        w.stop(Duration::from_secs(15));
    }
    server.stop(Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_one_server_three_workers_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", dir.path().join("flare.db").display());
    one_server_three_workers_and_a_sigkill(&db_url, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_one_server_three_workers_survive_a_sigkill() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    one_server_three_workers_and_a_sigkill(&db.url, dir.path()).await;
}

/// `serve` and `worker` say alike which node they are and what they run (issue 25): the name
/// given with `--node-name`, unquoted in both, and a start-up line naming the jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_worker_log_their_node_and_jobs_alike() {
    let db = TestDb::new(Backend::Sqlite).await;
    let port = free_port();
    let mut serve = process::flare(&[
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--database-url",
        &db.url,
        "--node-name",
        "web-1",
        "--demo",
    ]);
    serve.env("RUST_LOG", "info");
    let serve = Proc::spawn("flare serve", serve);
    wait_healthy(port).await;
    let mut worker = process::flare(&[
        "worker",
        "--database-url",
        &db.url,
        "--node-name",
        "worker-1",
    ]);
    worker.env("RUST_LOG", "info");
    let mut worker = Proc::spawn("flare worker", worker);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !worker.output().contains("flare worker is running jobs") {
        worker.assert_running();
        assert!(Instant::now() < deadline, "{}", worker.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, w) = (serve.output(), worker.output());
    assert!(s.contains("node=web-1"), "{s}");
    assert!(w.contains("node=worker-1"), "{w}");
    assert!(!w.contains("node=\""), "unquoted, as serve's: {w}");
    assert!(
        s.contains("this node runs") && s.contains("defined in its code"),
        "{s}"
    );
    assert!(w.contains("this node runs no jobs yet"), "{w}");
    worker.stop(Duration::from_secs(20));
    serve.stop(Duration::from_secs(20));
}
