//! Multi-process test: one `flare serve` and three `flare worker` processes (the real binary) share
//! one database. 10,000 events arrive over HTTP (`POST /trigger`, concurrent); half-way one worker
//! is killed with SIGKILL. Afterwards every event's runs each have exactly one successful
//! completion, its chained event was sent exactly once, and nothing is left queued or running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flare::{Client, RunStatus};
use serde_json::json;
use tokio::task::JoinSet;

const EVENTS: usize = 10_000;
const SENDERS: usize = 32;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A spawned `flare` process, killed if the test fails half-way so none outlives it.
struct Proc {
    child: Child,
    what: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(what: &str, args: &[&str], db_url: &str, dir: &std::path::Path) -> Proc {
        let child = Command::new(env!("CARGO_BIN_EXE_flare"))
            .args(args)
            .args(["--lease-secs", "2", "--shutdown-grace-secs", "5"])
            .env("DATABASE_URL", db_url)
            .env_remove("FLARE_API_KEY")
            .env("RUST_LOG", "warn")
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Proc {
            child,
            what: what.to_string(),
        }
    }

    /// SIGTERM, then the exit status must be success (graceful shutdown).
    fn stop_gracefully(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                assert!(
                    exit.success(),
                    "{} exits 0 on SIGTERM, got {exit:?}",
                    self.what
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop on SIGTERM",
                self.what
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn wait_healthy(port: u16) {
    let url = format!("http://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = reqwest::get(&url).await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("flare serve did not become healthy on port {port}");
}

/// The whole scenario on the database at `db_url`; `dir` is the processes' working directory.
async fn one_server_three_workers_and_a_sigkill(db_url: &str, dir: &std::path::Path) {
    let started = Instant::now();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = Proc::spawn("flare serve", &["serve", "--listen", &listen], db_url, dir);
    wait_healthy(port).await;
    let mut workers: Vec<Proc> = (0..3)
        .map(|i| Proc::spawn(&format!("flare worker {i}"), &["worker"], db_url, dir))
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
    let lost = Arc::new(AtomicUsize::new(0));
    let children = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let mut checks = JoinSet::new();
    for part in 0..8 {
        let (store, lost, children) = (store.clone(), Arc::clone(&lost), Arc::clone(&children));
        checks.spawn(async move {
            for i in (part..EVENTS).step_by(8) {
                let id = format!("mp-{i}");
                let detail = store.event_detail(&id).await.unwrap().expect("stored");
                assert_eq!(detail.runs.len(), 1, "{id}: one process-upload run");
                assert_eq!(detail.children.len(), 1, "{id}: file.processed sent once");
                let child_id = detail.children[0].id.clone();
                assert!(children.lock().unwrap().insert(child_id.clone()));
                let child = store.event_detail(&child_id).await.unwrap().unwrap();
                assert_eq!(child.runs.len(), 1, "{child_id}: one run");
                for run in detail.runs.iter().chain(child.runs.iter()) {
                    assert_eq!(run.status, RunStatus::Succeeded, "run {}", run.id);
                    let run = store.run_detail(&run.id).await.unwrap().unwrap();
                    let outcomes: Vec<&str> =
                        run.attempts.iter().map(|a| a.outcome.as_str()).collect();
                    let successes = outcomes.iter().filter(|o| **o == "succeeded").count();
                    assert_eq!(successes, 1, "run {}: {outcomes:?}", run.run.id);
                    lost.fetch_add(
                        outcomes.iter().filter(|o| **o == "lost").count(),
                        Ordering::Relaxed,
                    );
                }
            }
        });
    }
    while let Some(done) = checks.join_next().await {
        done.expect("checks");
    }
    eprintln!(
        "{EVENTS} events sent in {sent_in:?}, all runs done after {done_in:?}; attempts lost with the killed worker and rescued: {}",
        lost.load(Ordering::Relaxed)
    );

    for w in workers {
        w.stop_gracefully();
    }
    server.stop_gracefully();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_one_server_three_workers_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", dir.path().join("flare.db").display());
    one_server_three_workers_and_a_sigkill(&db_url, dir.path()).await;
}
