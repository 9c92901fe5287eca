//! One repetition of each scenario, on its own temporary database. Each returns its figures by
//! metric name; [`super::run`] repeats them and summarizes.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::args::{db_url, Args, Error, Sample};
use super::report::{proc_status_kb, quantile};
use crate::{event_trigger, Client, EngineConfig, Io, Job, JobError, RunStatus};

/// The event every scenario sends; it starts exactly one run of [`JOB`].
pub(super) const EVENT: &str = "bench.noop";
/// The no-op job.
pub(super) const JOB: &str = "bench-noop";

fn join_error(e: tokio::task::JoinError) -> Error {
    Error::Stalled(format!("a benchmark task failed: {e}"))
}

/// A job on [`EVENT`] that does nothing but call `on_start` with the payload.
pub(super) fn noop_job(on_start: impl Fn(&Value) + Send + Sync + 'static) -> Job {
    let on_start = Arc::new(on_start);
    Job::new(JOB, "Benchmark no-op", "1.0.0")
        .trigger(event_trigger(EVENT))
        .run(move |payload: Value, _io: Io| {
            on_start(&payload);
            async move { Ok::<_, JobError>(Value::Null) }
        })
}

/// The no-op job of the multi-process scenario, run by `flare worker --bench-job`: `bench-noop`
/// on `bench.noop`, like the in-process scenarios' job. When the payload carries `sentAtUs`
/// (wall-clock microseconds just before the send), its output is `{"latencyUs": start − sent}`,
/// so send → start latency can be measured across processes; otherwise its output is null.
pub fn worker_noop_job() -> crate::Job {
    crate::Job::new(JOB, "Benchmark no-op", "1.0.0")
        .trigger(crate::event_trigger(EVENT))
        .run(|payload: serde_json::Value, _io: crate::Io| async move {
            let output = match payload["sentAtUs"].as_i64() {
                Some(sent) => {
                    serde_json::json!({ "latencyUs": chrono::Utc::now().timestamp_micros() - sent })
                }
                None => serde_json::Value::Null,
            };
            Ok::<_, crate::JobError>(output)
        })
}

pub(super) fn engine_config(args: &Args) -> EngineConfig {
    EngineConfig {
        concurrency: args.concurrency,
        claim_batch: args.claim_batch,
        ..EngineConfig::default()
    }
}

/// Does at once what the maintenance loop and the database would do some time after a bulk
/// load, so that the figures after it measure the load under test, not the seed's aftermath:
/// SQLite's search index catches up (until nothing is left: right after a seed the indexer sees a
/// busy writer and takes small chunks) and its WAL is checkpointed and reset; PostgreSQL runs
/// `VACUUM ANALYZE` (without it it plans with guessed row counts and reads through the seed's
/// dead rows). Returns how many events were indexed.
pub(super) async fn settle(client: &Client) -> Result<usize, Error> {
    let mut indexed = 0;
    while client.store().search_backlog().await? > 0 {
        indexed += client
            .store()
            .search_index(crate::store::SEARCH_CHUNK)
            .await?;
    }
    client.store().statistics_refresh().await?;
    Ok(indexed)
}

pub(super) fn count(counts: &std::collections::HashMap<RunStatus, u64>, status: RunStatus) -> u64 {
    counts.get(&status).copied().unwrap_or(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Send throughput: `senders` tasks each send one event at a time for `secs` seconds, workers
/// off. Each event starts one run, so each send writes an event and a run.
pub(super) async fn send(senders: usize, secs: f64, pb: &ProgressBar) -> Result<Sample, Error> {
    let dir = tempfile::tempdir()?;
    let client = Client::builder(&db_url(dir.path()))
        .workers(false)
        .connect()
        .await?;
    client.define_job(noop_job(|_| {}))?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut tasks = JoinSet::new();
    for sender in 0..senders {
        let (client, pb) = (client.clone(), pb.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                client
                    .send_event(EVENT, &json!({ "sender": sender, "i": i }))
                    .await?;
                latencies.push(ms(t.elapsed()));
                i += 1;
                pb.inc(1);
            }
            Ok::<_, Error>(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.map_err(join_error)??);
    }
    let elapsed = start.elapsed();
    let runs = count(&client.store().run_counts().await?, RunStatus::Queued);
    client.shutdown().await;
    if runs != latencies.len() as u64 {
        return Err(Error::Stalled(format!(
            "{} events were sent but {runs} runs are queued",
            latencies.len()
        )));
    }
    latencies.sort_by(f64::total_cmp);
    Ok(Sample::from([
        ("events", latencies.len() as f64),
        ("secs", elapsed.as_secs_f64()),
        (
            "events_per_s",
            latencies.len() as f64 / elapsed.as_secs_f64(),
        ),
        ("send_p50_ms", quantile(&latencies, 0.5)),
        ("send_p99_ms", quantile(&latencies, 0.99)),
    ]))
}

/// End to end: `args.events` events sent by `args.e2e_senders` tasks while the workers run;
/// timed from the first send until the store counts every run `succeeded`.
pub(super) async fn e2e(args: &Args, pb: &ProgressBar) -> Result<Sample, Error> {
    let n = args.events;
    let dir = tempfile::tempdir()?;
    let client = Client::builder(&db_url(dir.path()))
        .config(engine_config(args))
        .connect()
        .await?;
    let started = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&started);
    client.define_job(noop_job(move |_| {
        s.fetch_add(1, Ordering::Relaxed);
    }))?;
    let next = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..args.e2e_senders.max(1) {
        let (client, next, sent) = (client.clone(), Arc::clone(&next), Arc::clone(&sent));
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, Error>(());
                }
                client.send_event(EVENT, &json!({ "i": i })).await?;
                sent.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let limit = Duration::from_secs(120).max(Duration::from_millis(n as u64));
    let mut send_done: Option<Duration> = None;
    let elapsed = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let ran = started.load(Ordering::Relaxed);
        pb.set_position(ran as u64);
        if send_done.is_none() && sent.load(Ordering::Relaxed) >= n {
            send_done = Some(start.elapsed());
        }
        if ran >= n {
            let counts = client.store().run_counts().await?;
            if count(&counts, RunStatus::Succeeded) >= n as u64 {
                break start.elapsed();
            }
        }
        if start.elapsed() > limit
            || tasks
                .try_join_next()
                .is_some_and(|r| !matches!(r, Ok(Ok(()))))
        {
            let counts = client.store().run_counts().await?;
            client.shutdown().await;
            return Err(Error::Stalled(format!(
                "e2e did not finish in {limit:?}: {} sent, {ran} started, counts {counts:?}",
                sent.load(Ordering::Relaxed)
            )));
        }
    };
    while let Some(done) = tasks.join_next().await {
        done.map_err(join_error)??;
    }
    client.shutdown().await;
    let send_secs = send_done.unwrap_or(elapsed).as_secs_f64();
    Ok(Sample::from([
        ("events", n as f64),
        ("secs", elapsed.as_secs_f64()),
        ("runs_per_s", n as f64 / elapsed.as_secs_f64()),
        ("send_phase_secs", send_secs),
        ("send_phase_events_per_s", n as f64 / send_secs),
    ]))
}

/// Latency: events sent one call each at `args.latency_rate` per second for
/// `args.latency_secs`; latency is run start (the job's first line) minus the instant just before
/// the send call.
pub(super) async fn latency(args: &Args, pb: &ProgressBar) -> Result<Sample, Error> {
    let n = (u64::from(args.latency_rate) * args.latency_secs) as usize;
    let dir = tempfile::tempdir()?;
    let client = Client::builder(&db_url(dir.path()))
        .config(engine_config(args))
        .connect()
        .await?;
    let base = Instant::now();
    let seen: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let s = Arc::clone(&seen);
    client.define_job(noop_job(move |payload| {
        let now = base.elapsed().as_micros() as f64;
        let sent = payload["t_us"].as_f64().unwrap_or(now);
        if let Ok(mut seen) = s.lock() {
            seen.push((now - sent) / 1000.0);
        }
    }))?;
    // Let the engine settle (job stored, worker waiting) before the clock starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(
        1.0 / f64::from(args.latency_rate.max(1)),
    ));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = JoinSet::new();
    let start = Instant::now();
    for i in 0..n {
        ticks.tick().await;
        let client = client.clone();
        tasks.spawn(async move {
            let t = Instant::now();
            let t_us = t.duration_since(base).as_micros() as u64;
            client
                .send_event(EVENT, &json!({ "i": i, "t_us": t_us }))
                .await?;
            Ok::<_, Error>(ms(t.elapsed()))
        });
        pb.inc(1);
    }
    let send_secs = start.elapsed().as_secs_f64();
    let mut send_ms = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        send_ms.push(done.map_err(join_error)??);
    }
    let waited = Instant::now();
    let mut latencies = loop {
        let got = seen.lock().map(|s| s.len()).unwrap_or(0);
        if got >= n {
            break seen.lock().map(|s| s.clone()).unwrap_or_default();
        }
        if waited.elapsed() > Duration::from_secs(30) {
            client.shutdown().await;
            return Err(Error::Stalled(format!("only {got} of {n} runs started")));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    client.shutdown().await;
    latencies.sort_by(f64::total_cmp);
    send_ms.sort_by(f64::total_cmp);
    Ok(Sample::from([
        ("events", n as f64),
        ("achieved_rate", n as f64 / send_secs),
        ("p50_ms", quantile(&latencies, 0.5)),
        ("p95_ms", quantile(&latencies, 0.95)),
        ("p99_ms", quantile(&latencies, 0.99)),
        ("max_ms", quantile(&latencies, 1.0)),
        ("send_call_p50_ms", quantile(&send_ms, 0.5)),
        ("send_call_p99_ms", quantile(&send_ms, 0.99)),
    ]))
}

/// Idle memory: starts `bin serve` on a temp database and loopback port 0, waits `idle_secs`,
/// reads its `VmRSS` and `VmHWM`, and stops it.
pub(super) async fn idle_memory(bin: &Path, idle_secs: u64) -> Result<Sample, Error> {
    let dir = tempfile::tempdir()?;
    let mut child = tokio::process::Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url"])
        .arg(db_url(dir.path()))
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    if let Some(status) = child.try_wait()? {
        return Err(Error::Stalled(format!(
            "{} serve exited early ({status})",
            bin.display()
        )));
    }
    let pid = child
        .id()
        .map(|p| p.to_string())
        .ok_or_else(|| Error::Stalled("flare serve has no pid".into()))?;
    let rss = proc_status_kb(&pid, "VmRSS");
    let hwm = proc_status_kb(&pid, "VmHWM");
    child.start_kill()?;
    let _ = child.wait().await;
    match (rss, hwm) {
        (Some(rss), Some(hwm)) => Ok(Sample::from([
            ("idle_rss_mb", rss as f64 / 1024.0),
            ("idle_hwm_mb", hwm as f64 / 1024.0),
        ])),
        _ => Err(Error::Stalled(format!(
            "cannot read /proc/{pid}/status (Linux only)"
        ))),
    }
}
