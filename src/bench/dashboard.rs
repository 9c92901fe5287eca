//! `flare bench dashboard`: the dashboard's server time at scale.
//!
//! Seeds a fresh SQLite database with `--events` events through
//! [`Store::event_insert_many`](crate::store::Store::event_insert_many) in batches, spread over the
//! last 24 hours, four event names with one job each, so every event starts one run; the workers
//! run them all (every 20th fails), so the history holds succeeded and failed runs. Then it builds
//! the HTTP app and calls each page through the router (`tower::ServiceExt::oneshot`, no socket):
//! the server time of a request from routing to the last byte of the rendered body. Each page is
//! requested once (reported as "first": cold caches, including the dashboard's statistics cache),
//! then `--requests` times; the report gives the median and min–max of those.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use indicatif::ProgressBar;
use serde_json::json;
use tower::ServiceExt;

use super::report::Figure;
use super::{db_url, Args, Error, Sample};
use crate::config::RawServe;
use crate::http::{app, AppState};
use crate::store::NewEvent;
use crate::{event_trigger, Client, EngineConfig, Io, Job, JobError, RetryPolicy, RunStatus};

/// Event names seeded, each with one job.
const NAMES: [&str; 4] = [
    "order.placed",
    "user.created",
    "file.uploaded",
    "payment.succeeded",
];
/// Events per insert transaction.
const BATCH: usize = 5_000;
/// One event in this many has a failing run.
const FAIL_EVERY: u64 = 20;

fn job(event: &'static str) -> Job {
    Job::new(format!("bench-{}", event.replace('.', "-")), event, "1.0.0")
        .trigger(event_trigger(event))
        .retry(RetryPolicy::default().max_attempts(1))
        .run(|payload: serde_json::Value, _io: Io| async move {
            if payload["i"].as_u64().unwrap_or(0) % FAIL_EVERY == 0 {
                return Err(JobError::from("card declined (seeded failure)"));
            }
            Ok(json!({"ok": true}))
        })
}

/// Inserts `n` events (and their runs) and waits until every run finished.
async fn seed(client: &Client, n: usize, pb: &ProgressBar) -> Result<Duration, Error> {
    let start = Instant::now();
    let now = client.clock().now_ms();
    let step = (86_400_000 / n.max(1) as i64).max(1);
    let mut i = 0usize;
    while i < n {
        let end = (i + BATCH).min(n);
        let batch: Vec<NewEvent> = (i..end)
            .map(|k| NewEvent {
                id: format!("evt_bench_{k:08}"),
                name: NAMES[k % NAMES.len()].to_string(),
                payload: json!({
                    "i": k,
                    "email": format!("user{k}@example.com"),
                    "amount": (k % 997) * 100,
                    "currency": if k % 3 == 0 { "eur" } else { "usd" },
                }),
                context: None,
                source: "api".into(),
                parent_run_id: None,
                deliver_at: None,
                now: now - (n - k) as i64 * step,
            })
            .collect();
        client.store().event_insert_many(batch).await?;
        i = end;
        pb.set_position(i as u64);
    }
    let limit = Duration::from_secs(1_800);
    loop {
        let counts = client.store().run_counts().await?;
        let active = [RunStatus::Queued, RunStatus::Running]
            .iter()
            .map(|s| counts.get(s).copied().unwrap_or(0))
            .sum::<u64>();
        if active == 0 {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            return Err(Error::Stalled(format!(
                "{active} runs still active after {limit:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The server time of one GET, ms; fails unless the page answers 200.
async fn time_page(router: &axum::Router, uri: &str) -> Result<f64, Error> {
    let start = Instant::now();
    let req = Request::builder()
        .uri(uri)
        .header("host", "bench.local")
        .body(Body::empty())
        .map_err(|e| Error::Stalled(format!("bad request {uri}: {e}")))?;
    let res = router
        .clone()
        .oneshot(req)
        .await
        .map_err(|e| Error::Stalled(format!("{uri}: {e}")))?;
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .map_err(|e| Error::Stalled(format!("{uri}: {e}")))?;
    let elapsed = start.elapsed().as_secs_f64() * 1000.0;
    if status != StatusCode::OK {
        return Err(Error::Stalled(format!(
            "{uri} answered {status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    Ok(elapsed)
}

/// Seeds, then times each page. Returns one figure per page (metric `server_ms`).
pub(super) async fn run(args: &Args, pb: &ProgressBar) -> Result<Vec<Figure>, Error> {
    let n = args.events;
    let dir = tempfile::tempdir()?;
    let url = db_url(dir.path());
    let client = Client::builder(&url)
        .config(EngineConfig {
            concurrency: args.concurrency,
            claim_batch: args.claim_batch,
            ..EngineConfig::default()
        })
        .connect()
        .await?;
    for name in NAMES {
        client.define_job(job(name))?;
    }
    let seeded = seed(&client, n, pb).await?;
    pb.finish_and_clear();
    eprintln!(
        "seeded {n} events and their runs in {:.1} s",
        seeded.as_secs_f64()
    );
    let config = RawServe {
        listen: "127.0.0.1:0".into(),
        database_url: url,
        concurrency: 1,
        retention_days: 0,
        lease_secs: 30,
        shutdown_grace_secs: 5,
        ..Default::default()
    }
    .validate()
    .map_err(|e| Error::Stalled(e.to_string()))?;
    let router = app(AppState::new(client.clone(), config));
    let middle = format!("evt_bench_{:08}", n / 2);
    let rare = format!("user{}@example.com", n / 3);
    let failed_run = client
        .store()
        .runs_list(crate::store::query::RunQuery {
            status: Some(RunStatus::Failed),
            limit: 1,
            ..Default::default()
        })
        .await?
        .items
        .first()
        .map(|r| r.run.id.clone())
        .unwrap_or_default();
    let pages: Vec<(&str, String)> = vec![
        ("events page", "/events".into()),
        (
            "filtered page",
            "/events?name=order.placed&status=failed".into(),
        ),
        (
            "payload search, 1h",
            format!("/events?q={}", crate::http::dashboard::url_encode(&rare)),
        ),
        (
            "payload search, 24h",
            format!(
                "/events?q={}&within=24h",
                crate::http::dashboard::url_encode(&rare)
            ),
        ),
        (
            "payload search, all",
            format!(
                "/events?q={}&within=all",
                crate::http::dashboard::url_encode(&rare)
            ),
        ),
        ("payload search, common", "/events?q=eur&within=all".into()),
        (
            "event detail",
            format!("/events/{}", crate::http::dashboard::url_encode(&middle)),
        ),
        ("overview 1h", "/".into()),
        ("overview 24h", "/?window=24h".into()),
        ("runs failed", "/runs?status=failed".into()),
        ("run detail", format!("/runs/{failed_run}")),
        ("jobs", "/jobs".into()),
        (
            "events page 100",
            String::new(), // filled below: follows the cursor 99 times
        ),
    ];
    let mut figures = Vec::new();
    let reqs = args.requests.max(1);
    for (label, uri) in pages {
        let uri = if uri.is_empty() {
            deep_page(&router, 100).await?
        } else {
            uri
        };
        let first = time_page(&router, &uri).await?;
        let mut samples: Vec<Sample> = Vec::new();
        for _ in 0..reqs {
            let mut s = Sample::new();
            s.insert("server_ms", time_page(&router, &uri).await?);
            samples.push(s);
        }
        let settings =
            json!({"events": n, "uri": uri, "requests": reqs, "first_request_ms": first});
        let figure = Figure::new("dashboard", label.to_string(), settings, samples);
        if args.json {
            println!("{}", figure.json_line());
        }
        figures.push(figure);
    }
    if !args.json {
        println!(
            "{:<24} {:>10} {:>18}  uri",
            "page", "median ms", "min–max ms"
        );
        for f in &figures {
            let get = |m: &std::collections::BTreeMap<&str, f64>| {
                m.get("server_ms").copied().unwrap_or(f64::NAN)
            };
            println!(
                "{:<24} {:>10.1} {:>18} {:>10.1}  {}",
                f.variant,
                get(&f.median),
                format!("{:.1}–{:.1}", get(&f.min), get(&f.max)),
                f.settings["first_request_ms"].as_f64().unwrap_or(f64::NAN),
                f.settings["uri"].as_str().unwrap_or("")
            );
        }
    }
    client.shutdown().await;
    Ok(figures)
}

/// The URI of the `n`th page of `/events`, found by following the "Older" links.
async fn deep_page(router: &axum::Router, n: usize) -> Result<String, Error> {
    let mut uri = "/events".to_string();
    for _ in 1..n {
        let req = Request::builder()
            .uri(&uri)
            .body(Body::empty())
            .map_err(|e| Error::Stalled(e.to_string()))?;
        let res = router
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| Error::Stalled(e.to_string()))?;
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .map_err(|e| Error::Stalled(e.to_string()))?;
        let html = String::from_utf8_lossy(&body);
        let Some(next) = html
            .split("class=\"older\" href=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
        else {
            break;
        };
        uri = next.replace("&amp;", "&");
    }
    Ok(uri)
}
