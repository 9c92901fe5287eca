//! The HTTP endpoint scenario (`flare bench endpoint`): no-op runs executed by an HTTP job
//! endpoint in another process on the same machine.
//!
//! The endpoint is this binary's hidden `flare bench endpoint-server`: an axum server that checks
//! every request's signature, as an application must, and answers the `bench-noop` job with
//! `{"output": …}`. It is what a minimal endpoint costs, so the figures show Flare's side.
//! `--endpoint-cmd` runs another one instead (`benchmarks/endpoint-noop.mjs`: the same on plain
//! Node).
//!
//! - **throughput**: `--events` events sent by `--e2e-senders` tasks into a temporary SQLite
//!   database, each starting one endpoint run; timed from the first send until every run
//!   succeeded. Reports runs/s and the CPU time per run of Flare's process and of the
//!   endpoint's (from `/proc/<pid>/stat`).
//! - **latency**: events sent one call each at `--latency-rate` for `--latency-secs`; latency is
//!   the moment the endpoint received the run (wall clock, same machine) minus the instant just
//!   before the send call, read back from each run's output.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

use super::args::{db_url, Args, Error, Sample};
use super::report::quantile;
use super::scenarios::{EVENT, JOB};
use crate::endpoints::Registry;
use crate::store::query::{RunQuery, MAX_LIMIT};
use crate::webhooks::svix::{SvixHeaders, SvixVerifier};
use crate::{Client, EngineConfig, RunStatus};

/// The secret Flare and the benchmark endpoint share.
const SECRET: &str = "whsec_YmVuY2htYXJrLWVuZHBvaW50LXNlY3JldC0zMmJ5dGVzIQ==";

/// Serves the benchmark endpoint on a loopback port until killed; prints `listening ADDR`.
pub async fn serve_endpoint() -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening {}", listener.local_addr()?);
    let verifier = Arc::new(
        SvixVerifier::new(vec![SECRET.into()]).map_err(|e| Error::Stalled(e.to_string()))?,
    );
    let app = axum::Router::new().route(
        "/flare",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let verifier = Arc::clone(&verifier);
            async move { answer(&verifier, &headers, &body) }
        }),
    );
    axum::serve(listener, app).await?;
    Ok(())
}

fn answer(verifier: &SvixVerifier, headers: &HeaderMap, body: &[u8]) -> Response {
    let signed = SvixHeaders::from_lookup(|n| headers.get(n).and_then(|v| v.to_str().ok()))
        .and_then(|h| verifier.verify(&h, body, chrono::Utc::now().timestamp()));
    if signed.is_err() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let reply = if request["action"] == "index" {
        json!({"jobs": [{"id": JOB, "name": "Benchmark no-op", "version": "1.0.0", "trigger": {"event": EVENT}}]})
    } else {
        match request["event"]["payload"]["sentAtUs"].as_i64() {
            Some(sent) => {
                json!({"output": {"latencyUs": chrono::Utc::now().timestamp_micros() - sent}})
            }
            None => json!({"output": null}),
        }
    };
    axum::Json(reply).into_response()
}

/// The endpoint process and its URL.
async fn spawn_endpoint(args: &Args) -> Result<(Child, String), Error> {
    let mut command = match &args.endpoint_cmd {
        Some(cmd) => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("exec {cmd}")]);
            c
        }
        None => {
            let mut c = Command::new(match &args.flare_bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()?,
            });
            c.args(["bench", "endpoint-server"]);
            c
        }
    };
    let mut child = command
        .env("FLARE_ENDPOINT_SECRET", SECRET)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Stalled("no stdout from the endpoint".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .map_err(|_| Error::Stalled("the endpoint did not start".into()))??
        .unwrap_or_default();
    let addr = line
        .strip_prefix("listening ")
        .ok_or_else(|| Error::Stalled(format!("unexpected endpoint output {line:?}")))?;
    Ok((child, format!("http://{addr}/flare")))
}

/// Flare with the endpoint registered, on a fresh SQLite database.
async fn flare(args: &Args, url: &str) -> Result<(Client, tempfile::TempDir), Error> {
    let dir = tempfile::tempdir()?;
    let client = Client::builder(&db_url(dir.path()))
        .config(EngineConfig {
            concurrency: args.concurrency,
            claim_batch: args.claim_batch,
            retention: None,
            ..EngineConfig::default()
        })
        .connect()
        .await?;
    Registry::new(client.clone())
        .add(url, Some(SECRET.into()))
        .await
        .map_err(|e| Error::Stalled(e.to_string()))?;
    Ok((client, dir))
}

/// CPU seconds (user + system) a process used so far.
fn cpu_secs(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line: 12 and 13 after the state.
    (ticks(11) + ticks(12)) / 100.0
}

/// Throughput: `args.events` endpoint runs, sent by `args.e2e_senders` tasks.
pub(super) async fn throughput(args: &Args, pb: &ProgressBar) -> Result<Sample, Error> {
    let (endpoint, url) = spawn_endpoint(args).await?;
    let endpoint_pid = endpoint.id().map(|p| p.to_string()).unwrap_or_default();
    let (client, _dir) = flare(args, &url).await?;
    let n = args.events;
    let (flare_cpu, endpoint_cpu) = (cpu_secs("self"), cpu_secs(&endpoint_pid));
    let start = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..args.e2e_senders.max(1) {
        let (client, next) = (client.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, Error>(());
                }
                client.send_event(EVENT, &json!({ "i": i })).await?;
            }
        });
    }
    let limit = Duration::from_secs(300);
    let elapsed = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let counts = client.store().run_counts().await?;
        let done = counts.get(&RunStatus::Succeeded).copied().unwrap_or(0);
        let failed = counts.get(&RunStatus::Failed).copied().unwrap_or(0);
        pb.set_position(done);
        if failed > 0 {
            client.shutdown().await;
            return Err(Error::Stalled(format!("{failed} endpoint runs failed")));
        }
        if done >= n as u64 {
            break start.elapsed();
        }
        if start.elapsed() > limit {
            client.shutdown().await;
            return Err(Error::Stalled(format!(
                "only {done} of {n} runs in {limit:?}"
            )));
        }
    };
    let flare_cpu = cpu_secs("self") - flare_cpu;
    let endpoint_cpu = cpu_secs(&endpoint_pid) - endpoint_cpu;
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| Error::Stalled(e.to_string()))??;
    }
    client.shutdown().await;
    drop(endpoint);
    Ok(Sample::from([
        ("events", n as f64),
        ("secs", elapsed.as_secs_f64()),
        ("runs_per_s", n as f64 / elapsed.as_secs_f64()),
        ("flare_cpu_ms_per_run", flare_cpu * 1000.0 / n as f64),
        ("endpoint_cpu_ms_per_run", endpoint_cpu * 1000.0 / n as f64),
    ]))
}

/// Latency: paced sends; each run's output carries the endpoint's receive time minus the send.
pub(super) async fn latency(args: &Args, pb: &ProgressBar) -> Result<Sample, Error> {
    let (endpoint, url) = spawn_endpoint(args).await?;
    let (client, _dir) = flare(args, &url).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = (u64::from(args.latency_rate) * args.latency_secs) as usize;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(
        1.0 / f64::from(args.latency_rate.max(1)),
    ));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = JoinSet::new();
    for i in 0..n {
        ticks.tick().await;
        let client = client.clone();
        tasks.spawn(async move {
            let sent = chrono::Utc::now().timestamp_micros();
            client
                .send_event(EVENT, &json!({ "i": i, "sentAtUs": sent }))
                .await
        });
        pb.inc(1);
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| Error::Stalled(e.to_string()))??;
    }
    let waited = Instant::now();
    loop {
        let counts = client.store().run_counts().await?;
        if counts.get(&RunStatus::Succeeded).copied().unwrap_or(0) >= n as u64 {
            break;
        }
        if waited.elapsed() > Duration::from_secs(60) {
            client.shutdown().await;
            return Err(Error::Stalled(format!("runs did not finish: {counts:?}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut latencies = Vec::with_capacity(n);
    let mut cursor = None;
    loop {
        let page = client
            .store()
            .runs_list(RunQuery {
                job_id: Some(JOB.into()),
                status: None,
                event_id: None,
                limit: MAX_LIMIT,
                cursor,
            })
            .await?;
        for r in &page.items {
            if let Some(us) = r.run.output.as_ref().and_then(|o| o["latencyUs"].as_f64()) {
                latencies.push(us / 1000.0);
            }
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    client.shutdown().await;
    drop(endpoint);
    latencies.sort_by(f64::total_cmp);
    Ok(Sample::from([
        ("events", n as f64),
        ("p50_ms", quantile(&latencies, 0.5)),
        ("p95_ms", quantile(&latencies, 0.95)),
        ("p99_ms", quantile(&latencies, 0.99)),
        ("max_ms", quantile(&latencies, 1.0)),
    ]))
}
