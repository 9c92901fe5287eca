//! Multi-process test of concurrency limits (issue 26): one `flare serve` and workers (the real
//! binary; two on SQLite, three on PostgreSQL) share one database and run the demo job
//! `sync-customer` (at most 1 at once per customer, 4 at once in all: the group `crm-api`).
//! 2,000 events over 100 customers arrive over HTTP; a third of the way in, one worker is
//! killed with SIGKILL while it holds slots. Each run records in its output when its body
//! started and ended (wall clock, microseconds, comparable across processes); afterwards no
//! customer ever had two runs at once, the group never more than 4, and every run succeeded
//! (the killed worker's slots came back after its lease).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use flare::store::query::{RunQuery, MAX_LIMIT};
use flare::{Client, RunStatus};
use serde_json::json;
use support::process::{self, free_port, wait_healthy, Proc};
use support::{Backend, TestDb};

const EVENTS: usize = 2_000;
const CUSTOMERS: usize = 100;
const GROUP_LIMIT: usize = 4;

/// One scenario at a time: each starts several processes, and the box may have two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn spawn(what: &str, args: &[&str], db_url: &str, dir: &std::path::Path) -> Proc {
    let mut command = process::flare(args);
    command
        .args(["--lease-secs", "2", "--shutdown-grace-secs", "5"])
        .env("DATABASE_URL", db_url)
        .current_dir(dir);
    Proc::spawn(what, command)
}

async fn limits_hold_across_processes(db_url: &str, dir: &std::path::Path, workers: usize) {
    let _serial = SERIAL.lock().await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = spawn("flare serve", &["serve", "--listen", &listen], db_url, dir);
    wait_healthy(port).await;
    let mut procs: Vec<Proc> = (0..workers)
        .map(|i| {
            spawn(
                &format!("flare worker {i}"),
                &["worker", "--demo"],
                db_url,
                dir,
            )
        })
        .collect();
    let http = reqwest::Client::new();
    let url = format!("http://{listen}/trigger");
    for i in 0..EVENTS {
        if i == EVENTS / 3 {
            // Wait until the victim holds slots, then kill it without a chance to clean up.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut killed = procs.remove(0);
            killed.child.kill().expect("SIGKILL");
            killed.child.wait().unwrap();
        }
        let body = json!({
            "event": "customer.synced",
            "id": format!("sync-{i}"),
            "payload": {"customerId": format!("cus_{}", i % CUSTOMERS), "sleepMs": 2},
        });
        let answer = http.post(&url).json(&body).send().await.expect("send");
        let status = answer.status();
        assert_eq!(
            status,
            200,
            "event {i}: {:?}\nserver:\n{}",
            answer.text().await,
            server.output()
        );
    }
    let observer = Client::builder(db_url)
        .workers(false)
        .connect()
        .await
        .unwrap();
    let store = observer.store().clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let counts = store.run_counts().await.unwrap();
        let succeeded = counts.get(&RunStatus::Succeeded).copied().unwrap_or(0);
        if succeeded == EVENTS as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "runs not done: {counts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every run's body, as it recorded itself.
    let mut spans: Vec<(String, u64, u64)> = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .runs_list(RunQuery {
                job_id: Some("sync-customer".into()),
                limit: MAX_LIMIT,
                cursor,
                ..RunQuery::default()
            })
            .await
            .unwrap();
        for item in page.items {
            let out = item.run.output.expect("a succeeded run has its output");
            spans.push((
                out["customerId"].as_str().unwrap().to_string(),
                out["startUs"].as_u64().unwrap(),
                out["endUs"].as_u64().unwrap(),
            ));
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(spans.len(), EVENTS);
    // Per customer: sorted by start, each run began after the previous one ended.
    let mut by_customer: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for (who, start, end) in &spans {
        by_customer.entry(who).or_default().push((*start, *end));
    }
    assert_eq!(by_customer.len(), CUSTOMERS);
    for (who, runs) in &mut by_customer {
        runs.sort();
        for pair in runs.windows(2) {
            assert!(pair[1].0 >= pair[0].1, "{who}: two runs at once: {pair:?}");
        }
    }
    // In all: never more than the group's limit at once (a sweep over starts and ends; an end
    // at the same microsecond as a start comes first).
    let mut edges: Vec<(u64, i32)> = spans
        .iter()
        .flat_map(|(_, s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_by_key(|(t, d)| (*t, *d));
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    assert!(
        peak as usize <= GROUP_LIMIT,
        "{peak} runs of the group at once"
    );
    eprintln!("{EVENTS} runs over {CUSTOMERS} customers: at most {peak} at once in the group");
    for p in procs {
        p.stop(Duration::from_secs(15));
    }
    server.stop(Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_workers_and_a_server_keep_keyed_and_group_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", dir.path().join("flare.db").display());
    limits_hold_across_processes(&db_url, dir.path(), 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_three_workers_and_a_server_keep_keyed_and_group_limits() {
    let Some(db) = TestDb::new_or_skip(Backend::Postgres).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    limits_hold_across_processes(&db.url, dir.path(), 3).await;
}
