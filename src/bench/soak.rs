//! The soak scenario (`flare bench soak`): a long day compressed. A real `flare serve` (this
//! binary, on a temporary SQLite database, demo jobs on) gets `--rate` `POST /trigger`/s of
//! `user.created` (two runs each) for `--soak-secs`, while a dashboard-like reader asks for
//! `/api/stats`, `/api/events`, `/api/jobs` and the overview page once a second. Every
//! `--sample-secs` it prints one line: the server's resident memory, the WAL and database file
//! sizes, the sends' p50/p99 latency and the stats read's p50 in that window, and how many sends
//! failed. Flat memory, a bounded WAL and steady latency are what a long day needs.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::process::Command;

use super::args::{Args, Error};
use super::report::{proc_status_kb, quantile};

/// One window's figures.
#[derive(Debug, Default)]
struct Window {
    send_ms: Vec<f64>,
    stats_ms: Vec<f64>,
    failed: u64,
}

fn file_mb(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1_048_576.0)
}

/// Runs the soak and prints a line per sample (JSON lines with `--json`).
pub(super) async fn run(args: &Args) -> Result<(), Error> {
    let bin = match &args.flare_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?,
    };
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("flare.db");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(bin)
        .args(["serve", "--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--database-url")
        .arg(format!("sqlite://{}", db.display()))
        .env("RUST_LOG", "warn")
        .env_remove("FLARE_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().map(|p| p.to_string()).unwrap_or_default();
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if http.get(format!("{base}/healthz")).send().await.is_ok() {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(Error::Stalled("flare serve did not start".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let window = Arc::new(Mutex::new(Window::default()));
    let end = Instant::now() + Duration::from_secs(args.soak_secs);

    let sender = {
        let (http, base, window) = (http.clone(), base.clone(), Arc::clone(&window));
        let rate = args.rate.max(1);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = 0u64;
            while Instant::now() < end {
                ticks.tick().await;
                i += 1;
                let (http, base, window) = (http.clone(), base.clone(), Arc::clone(&window));
                tokio::spawn(async move {
                    let body = json!({"event": "user.created", "payload": {
                        "userId": format!("u_{i}"), "email": format!("u{i}@example.com"), "name": "Soak"}});
                    let t = Instant::now();
                    let ok = http
                        .post(format!("{base}/trigger"))
                        .json(&body)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    if let Ok(mut w) = window.lock() {
                        if ok {
                            w.send_ms.push(ms);
                        } else {
                            w.failed += 1;
                        }
                    }
                });
            }
        })
    };
    let reader = {
        let (http, base, window) = (http.clone(), base.clone(), Arc::clone(&window));
        tokio::spawn(async move {
            while Instant::now() < end {
                let t = Instant::now();
                let _ = http.get(format!("{base}/api/stats")).send().await;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if let Ok(mut w) = window.lock() {
                    w.stats_ms.push(ms);
                }
                for path in ["/api/events?limit=50", "/api/jobs", "/"] {
                    let _ = http.get(format!("{base}{path}")).send().await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    let wal = dir.path().join("flare.db-wal");
    if !args.json {
        println!(
            "{:>7} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7}",
            "secs",
            "rss_mb",
            "wal_mb",
            "db_mb",
            "sends/s",
            "send_p50",
            "send_p99",
            "stats_p50",
            "failed"
        );
    }
    let every = Duration::from_secs(args.sample_secs.max(1));
    let mut max_wal = 0.0_f64;
    while Instant::now() < end {
        tokio::time::sleep(every.min(end.saturating_duration_since(Instant::now()))).await;
        let mut w = window
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        w.send_ms.sort_by(f64::total_cmp);
        w.stats_ms.sort_by(f64::total_cmp);
        let rss_mb = proc_status_kb(&pid, "VmRSS").unwrap_or(0) as f64 / 1024.0;
        let (wal_mb, db_mb) = (file_mb(&wal), file_mb(&db));
        max_wal = max_wal.max(wal_mb);
        let line = json!({
            "secs": started.elapsed().as_secs(),
            "rss_mb": rss_mb, "wal_mb": wal_mb, "db_mb": db_mb,
            "sends_per_s": w.send_ms.len() as f64 / every.as_secs_f64(),
            "send_p50_ms": quantile(&w.send_ms, 0.5), "send_p99_ms": quantile(&w.send_ms, 0.99),
            "stats_p50_ms": quantile(&w.stats_ms, 0.5), "failed": w.failed,
        });
        if args.json {
            println!("{line}");
        } else {
            println!(
                "{:>7} {:>9.1} {:>8.1} {:>8.1} {:>9.0} {:>9.2} {:>9.2} {:>8.1} {:>7}",
                line["secs"],
                rss_mb,
                wal_mb,
                db_mb,
                line["sends_per_s"].as_f64().unwrap_or(0.0),
                line["send_p50_ms"].as_f64().unwrap_or(0.0),
                line["send_p99_ms"].as_f64().unwrap_or(0.0),
                line["stats_p50_ms"].as_f64().unwrap_or(0.0),
                w.failed
            );
        }
    }
    let _ = sender.await;
    let _ = reader.await;
    let _ = child.kill().await;
    if !args.json {
        println!("largest WAL seen: {max_wal:.1} MB");
    }
    Ok(())
}
