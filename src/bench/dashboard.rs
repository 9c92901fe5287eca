//! `flare bench dashboard`: the dashboard's server time at scale.
//!
//! Seeds a fresh database (SQLite, or PostgreSQL with `--database-url postgres://…`) with
//! `--events` events through
//! [`Store::event_insert_many`](crate::store::Store::event_insert_many) in batches, spread over the
//! last 24 hours, four event names with one job each, so every event starts one run; the workers
//! run them all (every 20th fails), so the history holds succeeded and failed runs. Then it builds
//! the HTTP app and calls each page through the router (`tower::ServiceExt::oneshot`, no socket):
//! the server time of a request from routing to the last byte of the rendered body. Each page is
//! timed on a node started for it (a freshly opened store and app): its first request is
//! reported as "first" (cold: no pooled connection or prepared statement, an empty statistics
//! cache; the operating system's file cache stays warm), then `--requests` more give the median
//! and min–max.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use indicatif::ProgressBar;
use serde_json::json;
use tower::ServiceExt;

use super::args::{Args, Error, Sample};
use super::backend::{Backend, Place};
use super::report::Figure;
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
        .header("host", "localhost")
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

/// Seeds a fresh database (SQLite in a temp dir, or with `--database-url postgres://…` a new
/// PostgreSQL database on that server, dropped after), then times each page. Returns one figure
/// per page (metric `server_ms`).
pub(super) async fn run(args: &Args, pb: &ProgressBar) -> Result<Vec<Figure>, Error> {
    // On PostgreSQL when `--database-url` names a server, else on SQLite.
    let backend = *Backend::selected(args).last().unwrap_or(&Backend::Sqlite);
    let place = Place::new(args, backend, "flare_bench_dash").await?;
    let result = measure(args, pb, backend.name(), place.url().to_string()).await;
    place.remove().await;
    result
}

/// A client of the database at `url` with the settings of `args`.
async fn connect(args: &Args, url: &str) -> Result<Client, Error> {
    Ok(Client::builder(url)
        .config(EngineConfig {
            concurrency: args.concurrency,
            claim_batch: args.claim_batch,
            ..EngineConfig::default()
        })
        .connect()
        .await?)
}

/// Seeds the database at `url`, then times each page on a node started for that page alone.
async fn measure(
    args: &Args,
    pb: &ProgressBar,
    store: &str,
    url: String,
) -> Result<Vec<Figure>, Error> {
    let n = args.events;
    let client = connect(args, &url).await?;
    for name in NAMES {
        client.define_job(job(name))?;
    }
    let seeded = seed(&client, n, pb).await?;
    pb.finish_and_clear();
    eprintln!(
        "{store}: seeded {n} events and their runs in {:.1} s",
        seeded.as_secs_f64()
    );
    let start = Instant::now();
    let indexed = super::scenarios::settle(&client).await?;
    eprintln!(
        "{store}: the seed settled ({indexed} events indexed for search; VACUUM ANALYZE or the WAL reset) in {:.1} s",
        start.elapsed().as_secs_f64()
    );
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
    client.shutdown().await;

    let middle = format!("evt_bench_{:08}", n / 2);
    let rare = crate::http::dashboard::url_encode(&format!("user{}@example.com", n / 3));
    let pages: Vec<(&str, String)> = vec![
        ("overview 1h", "/".into()),
        ("overview 24h", "/?window=24h".into()),
        ("events page", "/events".into()),
        (
            "filtered page",
            "/events?name=order.placed&status=failed".into(),
        ),
        ("events by source", "/events?source=api".into()),
        ("payload search, 1h", format!("/events?q={rare}")),
        (
            "payload search, 24h",
            format!("/events?q={rare}&within=24h"),
        ),
        (
            "payload search, all",
            format!("/events?q={rare}&within=all"),
        ),
        (
            "search, no match, all",
            "/events?q=nobody%40nowhere&within=all".into(),
        ),
        ("payload search, common", "/events?q=eur&within=all".into()),
        (
            "event detail",
            format!("/events/{}", crate::http::dashboard::url_encode(&middle)),
        ),
        ("runs page", "/runs".into()),
        ("runs failed", "/runs?status=failed".into()),
        ("runs of a job", "/runs?jobId=bench-order-placed".into()),
        ("run detail", format!("/runs/{failed_run}")),
        ("jobs", "/jobs".into()),
        ("endpoints", "/endpoints".into()),
        ("webhooks", "/webhooks".into()),
        (
            "events page 100",
            String::new(), // filled below: follows the cursor 99 times
        ),
    ];
    let mut figures = Vec::new();
    let reqs = args.requests.max(1);
    for (label, uri) in pages {
        // A node started for this page: its first request meets a freshly opened store (no
        // pooled connections, no prepared statements) and an empty statistics cache.
        let client = connect(args, &url).await?;
        let router = router(&client, &url)?;
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
        client.shutdown().await;
        let settings = json!({
            "store": store, "events": n, "uri": uri, "requests": reqs, "first_request_ms": first,
        });
        let figure = Figure::new("dashboard", format!("{store}: {label}"), settings, samples);
        if args.json {
            println!("{}", figure.json_line());
        }
        figures.push(figure);
    }
    if !args.json {
        println!(
            "{:<34} {:>10} {:>10} {:>18}  uri",
            "page", "first ms", "median ms", "min–max ms"
        );
        for f in &figures {
            let get = |m: &std::collections::BTreeMap<&str, f64>| {
                m.get("server_ms").copied().unwrap_or(f64::NAN)
            };
            println!(
                "{:<34} {:>10.1} {:>10.1} {:>18}  {}",
                f.variant,
                f.settings["first_request_ms"].as_f64().unwrap_or(f64::NAN),
                get(&f.median),
                format!("{:.1}–{:.1}", get(&f.min), get(&f.max)),
                f.settings["uri"].as_str().unwrap_or("")
            );
        }
    }
    Ok(figures)
}

/// The HTTP app of `client`, configured as `flare serve` would be.
fn router(client: &Client, url: &str) -> Result<axum::Router, Error> {
    let config = RawServe {
        listen: "127.0.0.1:0".into(),
        database_url: url.to_string(),
        concurrency: 1,
        retention_days: 0,
        lease_secs: 30,
        shutdown_grace_secs: 5,
        ..Default::default()
    }
    .validate()
    .map_err(|e| Error::Stalled(e.to_string()))?;
    Ok(app(AppState::new(client.clone(), config)))
}

/// The URI of the `n`th page of `/events`, found by following the "Older" links.
async fn deep_page(router: &axum::Router, n: usize) -> Result<String, Error> {
    let mut uri = "/events".to_string();
    for _ in 1..n {
        let req = Request::builder()
            .uri(&uri)
            .header("host", "localhost")
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
