//! Crash tests: a real `flare serve` process is killed with SIGKILL while runs are in flight. After a
//! restart every acknowledged event is there, every run it started ends succeeded exactly once, and
//! chained events were not sent twice. The flood tests kill it in the middle of a full-speed
//! `POST /trigger` flood, on SQLite and on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flare::store::Store;
use flare::{Client, RunStatus, SendEvent};
use futures::StreamExt;
use serde_json::json;
use support::process::{self, free_port, wait_healthy, Proc};
use support::{Backend, TestDb};

/// `flare serve` on `port` with 1 s leases, in `dir`.
fn start_server(db_url: &str, port: u16, dir: &std::path::Path) -> Proc {
    let mut command = process::flare(&[
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--lease-secs",
        "1",
    ]);
    command.env("DATABASE_URL", db_url).current_dir(dir);
    Proc::spawn("flare serve", command)
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
    server.child.kill().expect("SIGKILL");
    server.child.wait().unwrap();
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
    let pid = server.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = server.child.wait().unwrap();
    assert!(
        exit.success(),
        "SIGTERM ends flare serve with exit code 0, got {exit:?}"
    );
}

/// Concurrent senders of the flood.
const SENDERS: usize = 64;
/// Acknowledged events before the kill.
const KILL_AFTER: usize = 3000;
/// Most events the flood sends (it normally stops at the kill, long before).
const FLOOD_MAX: usize = 100_000;

/// What the flood saw: the ids answered 200 (acknowledged), and how many sends started before the
/// kill failed (they were in flight when the server died).
struct Flood {
    acked: Vec<String>,
    in_flight: usize,
}

/// 64 senders `POST /trigger` `reminder.send` events (one run each, of `send-reminder`), each with
/// its own id, as fast as the server answers; the server is SIGKILLed once `KILL_AFTER` are
/// acknowledged, with every sender still sending.
async fn flood_and_kill(server: &mut Proc, port: u16) -> Flood {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/trigger");
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let (next, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let dead = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..SENDERS {
        let (http, url, acked) = (http.clone(), url.clone(), Arc::clone(&acked));
        let (next, failed, dead) = (Arc::clone(&next), Arc::clone(&failed), Arc::clone(&dead));
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= FLOOD_MAX {
                    return;
                }
                let id = format!("flood-{i:06}");
                let started_before_kill = !dead.load(Ordering::SeqCst);
                let body = json!({
                    "event": "reminder.send",
                    "payload": {"userId": format!("u{i}"), "message": "flood"},
                    "id": id,
                });
                match http.post(&url).json(&body).send().await {
                    Ok(r) if r.status().is_success() => acked.lock().unwrap().push(id),
                    Ok(r) => panic!("{id}: the live server answered {}", r.status()),
                    Err(e) => {
                        assert!(
                            dead.load(Ordering::SeqCst),
                            "{id}: the live server failed: {e}"
                        );
                        if started_before_kill {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        return;
                    }
                }
            }
        }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while acked.lock().unwrap().len() < KILL_AFTER {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flood reached {} acknowledged events in 30 s",
            acked.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    dead.store(true, Ordering::SeqCst);
    server.child.kill().expect("SIGKILL");
    server.child.wait().unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    Flood {
        acked,
        in_flight: failed.load(Ordering::Relaxed),
    }
}

/// Floods a `flare serve` on `db_url`, kills it mid-flood, restarts it on the same database and
/// checks that nothing acknowledged was lost and every run succeeded exactly once.
///
/// Why this catches an acknowledgement sent before COMMIT: 64 sends are in flight at every
/// instant, and the store commits them in groups. A server that answered 200 before its
/// transaction committed would have, at the SIGKILL, acknowledged events whose transaction was
/// still open (or queued for the next group commit); they vanish with the process, and their ids
/// fail the "every acknowledged event is stored" check below. Sends that were in flight and not
/// answered may or may not be stored; if stored, they carry their run (one transaction), which
/// the "no run left open, all succeeded" check covers too.
async fn flood_kill_restart(db_url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = start_server(db_url, port, dir.path());
    wait_healthy(port).await;
    let flood = flood_and_kill(&mut server, port).await;
    eprintln!(
        "acknowledged before the kill: {}, in flight at the kill: {}",
        flood.acked.len(),
        flood.in_flight
    );
    assert!(flood.acked.len() >= KILL_AFTER);
    assert!(
        flood.in_flight > 0,
        "the kill must land while sends are in flight"
    );

    let mut server = start_server(db_url, port, dir.path());
    wait_healthy(port).await;
    let store = Store::open(db_url).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let counts = loop {
        let counts = store.run_counts().await.unwrap();
        let open = counts.get(&RunStatus::Queued).copied().unwrap_or(0)
            + counts.get(&RunStatus::Running).copied().unwrap_or(0);
        if open == 0 {
            break counts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs still open after the restart: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let succeeded = counts.get(&RunStatus::Succeeded).copied().unwrap_or(0);
    assert_eq!(
        counts.values().sum::<u64>(),
        succeeded,
        "every run ends succeeded: {counts:?}"
    );
    assert!(
        succeeded >= flood.acked.len() as u64,
        "fewer runs than acknowledged events ({}): acknowledged events were lost; {counts:?}",
        flood.acked.len()
    );

    let checks = futures::stream::iter(flood.acked.iter().map(|id| {
        let store = store.clone();
        async move {
            let detail = store.event_detail(id).await.unwrap();
            let detail = detail.unwrap_or_else(|| panic!("acknowledged event {id} is stored"));
            assert_eq!(detail.runs.len(), 1, "{id}: one send-reminder run");
            let run = store.run_detail(&detail.runs[0].id).await.unwrap().unwrap();
            assert_eq!(run.run.status, RunStatus::Succeeded, "run of {id}");
            let successes = run
                .attempts
                .iter()
                .filter(|a| a.outcome == "succeeded")
                .count();
            assert_eq!(successes, 1, "the run of {id} succeeded exactly once");
            run.attempts.iter().filter(|a| a.outcome == "lost").count()
        }
    }))
    .buffer_unordered(16)
    .collect::<Vec<usize>>()
    .await;
    eprintln!(
        "runs rescued after the crash: {}",
        checks.iter().sum::<usize>()
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_flood_loses_no_acknowledged_event_on_sqlite() {
    let db = TestDb::new(Backend::Sqlite).await;
    flood_kill_restart(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_flood_loses_no_acknowledged_event_on_postgres() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    flood_kill_restart(&db.url).await;
}
