//! The multi-process scenario (`flare bench pg-scale`): `flare worker` processes on a shared
//! database (meant for PostgreSQL; any URL works).
//!
//! - **drain**: `--events` no-op events are stored first (workers off, batches of 1,000), then N
//!   `flare worker --bench-job` processes start; timed from their spawn until the store counts
//!   every run `succeeded` (process start-up included, ≈ 0.1 s).
//! - **latency**: N idle workers; events sent one call each at `--latency-rate` for
//!   `--latency-secs`; latency is the job's start minus the wall-clock instant just before the send
//!   call, computed inside the worker process (same machine, same clock) and read back from each
//!   run's output.
//!
//! Each repetition ends by pruning everything it finished, so repetitions start from the same
//! table sizes.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

use super::args::{Args, Error, Sample};
use super::report::quantile;
use super::scenarios::worker_noop_job as noop_job;
use super::scenarios::{EVENT, JOB};
use crate::model::Source;
use crate::store::query::{RunQuery, MAX_LIMIT};
use crate::{Client, RunStatus, SendEvent};

/// Events stored per transaction while seeding.
const SEED_BATCH: usize = 1000;

fn count(counts: &std::collections::HashMap<RunStatus, u64>, status: RunStatus) -> u64 {
    counts.get(&status).copied().unwrap_or(0)
}

async fn sender(url: &str) -> Result<Client, Error> {
    let client = Client::builder(url).workers(false).connect().await?;
    client.register_job(noop_job()).await?;
    let counts = client.store().run_counts().await?;
    let open = count(&counts, RunStatus::Queued) + count(&counts, RunStatus::Running);
    if open > 0 {
        return Err(Error::Stalled(format!(
            "the database has {open} queued or running runs: use an idle database"
        )));
    }
    Ok(client)
}

/// `n` worker processes running the bench job.
fn spawn_workers(bin: &Path, url: &str, n: usize, concurrency: usize) -> Result<Vec<Child>, Error> {
    (0..n)
        .map(|_| {
            Command::new(bin)
                .args(["worker", "--bench-job", "--retention-days", "0"])
                .args(["--concurrency", &concurrency.to_string()])
                .args(["--database-url", url])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .map_err(Error::from)
        })
        .collect()
}

/// SIGTERM each worker and wait for it.
async fn stop_workers(workers: Vec<Child>) {
    for mut w in workers {
        if let Some(pid) = w.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(10), w.wait())
            .await
            .is_err()
        {
            let _ = w.start_kill();
        }
    }
}

/// Deletes every finished event (and its runs) so the next repetition starts alike.
async fn prune_all(client: &Client) -> Result<(), Error> {
    while client.store().events_prune(i64::MAX, 5000).await? > 0 {}
    Ok(())
}

/// Waits until `target` runs succeeded in all, or fails after `limit`.
///
/// While runs are still queued it only asks for the next due one (one step down a partial
/// index) every 20 ms, and counts every run (a scan of the whole table) once a second for the
/// progress bar: counting every 20 ms cost PostgreSQL about 40% of a core at 200k runs, taken
/// from the workers being measured. Once nothing is queued it counts every 20 ms (the last
/// claimed runs finishing).
async fn wait_succeeded(
    client: &Client,
    target: u64,
    limit: Duration,
    pb: &ProgressBar,
    base: u64,
) -> Result<(), Error> {
    let start = Instant::now();
    let mut counted = None::<Instant>;
    loop {
        let queued = client
            .store()
            .runs_next_due(vec![JOB.to_string()])
            .await?
            .is_some();
        if !queued || counted.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            counted = Some(Instant::now());
            let counts = client.store().run_counts().await?;
            let done = count(&counts, RunStatus::Succeeded);
            pb.set_position(done.saturating_sub(base));
            if done >= target {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(Error::Stalled(format!(
                    "runs did not finish in {limit:?}: {counts:?}"
                )));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One drain repetition with `n` workers.
pub(super) async fn drain(
    args: &Args,
    bin: &Path,
    url: &str,
    n: usize,
    pb: &ProgressBar,
) -> Result<Sample, Error> {
    let events = args.events;
    let client = sender(url).await?;
    let base = count(&client.store().run_counts().await?, RunStatus::Succeeded);
    let seed_start = Instant::now();
    let mut seeding = JoinSet::new();
    let chunks: Vec<(usize, usize)> = (0..events)
        .step_by(SEED_BATCH)
        .map(|s| (s, (s + SEED_BATCH).min(events)))
        .collect();
    for part in chunks.chunks(chunks.len().div_ceil(4).max(1)) {
        let (client, part) = (client.clone(), part.to_vec());
        seeding.spawn(async move {
            for (from, to) in part {
                let batch = (from..to)
                    .map(|i| SendEvent::new(EVENT, &json!({ "i": i })))
                    .collect();
                client.send_batch(batch, Source::Api).await?;
            }
            Ok::<_, Error>(())
        });
    }
    while let Some(done) = seeding.join_next().await {
        done.map_err(|e| Error::Stalled(format!("seeding failed: {e}")))??;
    }
    let seed_secs = seed_start.elapsed().as_secs_f64();
    let start = Instant::now();
    let workers = spawn_workers(bin, url, n, args.concurrency)?;
    let limit = Duration::from_secs(300);
    let waited = wait_succeeded(&client, base + events as u64, limit, pb, base).await;
    let elapsed = start.elapsed();
    stop_workers(workers).await;
    waited?;
    prune_all(&client).await?;
    Ok(Sample::from([
        ("events", events as f64),
        ("workers", n as f64),
        ("seed_events_per_s", events as f64 / seed_secs),
        ("secs", elapsed.as_secs_f64()),
        ("runs_per_s", events as f64 / elapsed.as_secs_f64()),
    ]))
}

/// One latency repetition with `n` idle workers.
pub(super) async fn latency(
    args: &Args,
    bin: &Path,
    url: &str,
    n: usize,
    pb: &ProgressBar,
) -> Result<Sample, Error> {
    let total = (u64::from(args.latency_rate) * args.latency_secs) as usize;
    let client = sender(url).await?;
    let base = count(&client.store().run_counts().await?, RunStatus::Succeeded);
    let workers = spawn_workers(bin, url, n, args.concurrency)?;
    // Let the workers start and go idle before the clock starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(
        1.0 / f64::from(args.latency_rate.max(1)),
    ));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sends = JoinSet::new();
    let start = Instant::now();
    for i in 0..total {
        ticks.tick().await;
        let client = client.clone();
        sends.spawn(async move {
            let sent_at_us = chrono::Utc::now().timestamp_micros();
            let ev = client
                .send_event(EVENT, &json!({ "i": i, "sentAtUs": sent_at_us }))
                .await?;
            Ok::<_, Error>(ev.id)
        });
    }
    let send_secs = start.elapsed().as_secs_f64();
    let mut ids = Vec::with_capacity(total);
    while let Some(done) = sends.join_next().await {
        ids.push(done.map_err(|e| Error::Stalled(format!("a send failed: {e}")))??);
    }
    let waited = wait_succeeded(
        &client,
        base + total as u64,
        Duration::from_secs(60),
        pb,
        base,
    )
    .await;
    stop_workers(workers).await;
    waited?;
    // The latency is in each run's output; after the drain's pruning these are the only runs.
    let mut latencies = Vec::with_capacity(total);
    let mut cursor = None;
    loop {
        let page = client
            .store()
            .runs_list(RunQuery {
                job_id: Some(JOB.to_string()),
                limit: MAX_LIMIT,
                cursor,
                ..RunQuery::default()
            })
            .await?;
        for run in page.items {
            let us = run
                .run
                .output
                .as_ref()
                .and_then(|o| o["latencyUs"].as_f64())
                .ok_or_else(|| {
                    Error::Stalled(format!("run {}: no latency in its output", run.run.id))
                })?;
            latencies.push(us / 1000.0);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    if latencies.len() != ids.len() {
        return Err(Error::Stalled(format!(
            "{} events sent but {} runs found",
            ids.len(),
            latencies.len()
        )));
    }
    prune_all(&client).await?;
    latencies.sort_by(f64::total_cmp);
    Ok(Sample::from([
        ("events", total as f64),
        ("workers", n as f64),
        ("achieved_rate", total as f64 / send_secs),
        ("p50_ms", quantile(&latencies, 0.5)),
        ("p95_ms", quantile(&latencies, 0.95)),
        ("p99_ms", quantile(&latencies, 0.99)),
        ("max_ms", quantile(&latencies, 1.0)),
    ]))
}
