//! Crash test: a real `flare serve` process is killed with SIGKILL while runs are in flight. After a
//! restart every acknowledged event is there, every run it started ends succeeded exactly once, and
//! chained events were not sent twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flare::{Client, RunStatus, SendEvent};
use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the server if the test fails half-way, so no orphan process outlives it.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(db_url: &str, port: u16, dir: &std::path::Path) -> Server {
    Server(
        Command::new(env!("CARGO_BIN_EXE_flare"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--lease-secs",
                "1",
            ])
            .env("DATABASE_URL", db_url)
            .env_remove("FLARE_API_KEY")
            .env("RUST_LOG", "warn")
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start flare serve"),
    )
}

async fn wait_healthy(port: u16) {
    let url = format!("http://127.0.0.1:{port}/healthz");
    for _ in 0..500 {
        if let Ok(r) = reqwest::get(&url).await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("flare serve did not become healthy on port {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_event_and_every_run_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", dir.path().join("flare.db").display());
    let port = free_port();
    let mut server = start_server(&db_url, port, dir.path());
    wait_healthy(port).await;

    // Another process-like sender writes to the same database while the server works and dies.
    let sender = Client::builder(&db_url)
        .workers(false)
        .connect()
        .await
        .unwrap();
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    const TOTAL: usize = 3000;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (sender, acked) = (sender.clone(), Arc::clone(&acked));
        tasks.push(tokio::spawn(async move {
            for i in (t..TOTAL).step_by(8) {
                let ev = SendEvent::new(
                    "file.uploaded",
                    &json!({"fileId": format!("f{i}"), "filename": format!("f{i}.txt")}),
                )
                .id(format!("upload-{i}"));
                let stored = sender
                    .send_event_with(ev)
                    .await
                    .expect("the store is local: sends succeed");
                acked.lock().unwrap().push(stored.id);
            }
        }));
    }
    // Kill the server while it is busy.
    while acked.lock().unwrap().len() < TOTAL / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.0.kill().expect("SIGKILL");
    server.0.wait().unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let acked: Vec<String> = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), TOTAL);

    let mut server = start_server(&db_url, port, dir.path());
    wait_healthy(port).await;
    let store = sender.store().clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let counts = store.run_counts().await.unwrap();
        let open = counts.get(&RunStatus::Queued).copied().unwrap_or(0)
            + counts.get(&RunStatus::Running).copied().unwrap_or(0);
        // 2 runs on each upload (send-… none: process-upload) and 1 on each file.processed.
        let total: u64 = counts.values().sum();
        if open == 0 && total == 2 * TOTAL as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs still open after restart: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut lost_attempts = 0;
    let mut children_seen = HashSet::new();
    for id in &acked {
        let detail = store
            .event_detail(id)
            .await
            .unwrap()
            .expect("every acknowledged event is stored");
        assert_eq!(detail.runs.len(), 1, "{id}: process-upload");
        assert_eq!(
            detail.children.len(),
            1,
            "{id}: file.processed sent exactly once"
        );
        let child = &detail.children[0];
        assert!(children_seen.insert(child.id.clone()));
        let child = store.event_detail(&child.id).await.unwrap().unwrap();
        for run in detail.runs.iter().chain(child.runs.iter()) {
            assert_eq!(run.status, RunStatus::Succeeded, "run {} of {id}", run.id);
            let run = store.run_detail(&run.id).await.unwrap().unwrap();
            let successes = run
                .attempts
                .iter()
                .filter(|a| a.outcome == "succeeded")
                .count();
            assert_eq!(
                successes, 1,
                "run {} recorded one successful completion",
                run.run.id
            );
            lost_attempts += run.attempts.iter().filter(|a| a.outcome == "lost").count();
        }
    }
    eprintln!("runs rescued after the crash: {lost_attempts}");

    // A graceful stop exits cleanly.
    let pid = server.0.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = server.0.wait().unwrap();
    assert!(
        exit.success(),
        "SIGTERM ends flare serve with exit code 0, got {exit:?}"
    );
}
