//! `flare bench drain`: how fast the workers empty a backlog, comparable to the peer queues'
//! drain phase (N jobs already queued, a worker started, time from its start to the N-th
//! completion).
//!
//! Each repetition, on a temporary SQLite file and (with `--database-url postgres://…`) on a fresh
//! PostgreSQL database: a send-only client (workers off) stores `--events` events, each starting
//! one run of the no-op job, through
//! [`Store::event_insert_many`](crate::store::Store::event_insert_many) in batches of
//! [`SEED_BATCH`] (timed: the seeding rate); then a client with workers (`--concurrency`,
//! `--claim-batch`) is started, and the clock runs from its start until the store counts every run
//! `succeeded`. With `--keys K` the job has a concurrency limit of 1 per key over K keys (event
//! `i` has the key `i % K`): the runs are claimed through their keys' slots (`model::flow`).
//! With `--held H` a second job, limited to 1 run at once on a single key, has H runs queued
//! behind one that does not end while the drain lasts: the drain then measures how much a backlog
//! held at its limit costs other jobs (it must not be rescanned by every claim). After the clock
//! stops, the megabytes the repetition left stored are read back (`stored_mb`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::json;

use super::args::{Args, Error, Sample};
use super::backend::{Backend, Place};
use super::scenarios::{count, engine_config, noop_job, EVENT};
use crate::store::NewEvent;
use crate::{event_trigger, Client, ConcurrencyLimit, Io, Job, JobError, RunStatus};

/// The held job of `--held` and its event.
const HELD_JOB: &str = "bench-held";
const HELD_EVENT: &str = "bench.held";

/// Events stored per transaction while seeding.
const SEED_BATCH: usize = 5_000;

/// One repetition on `backend`.
pub(super) async fn run(args: &Args, backend: Backend, pb: &ProgressBar) -> Result<Sample, Error> {
    let place = Place::new(args, backend, "flare_bench_drain").await?;
    let mut result = measure(args, place.url(), pb).await;
    if let Ok(sample) = &mut result {
        sample.insert("stored_mb", place.stored_mb().await);
    }
    place.remove().await;
    result
}

/// The drain's job: the no-op job, with `--keys` a concurrency limit of 1 per key.
fn drain_job(keys: usize, on_start: impl Fn(&serde_json::Value) + Send + Sync + 'static) -> Job {
    let job = noop_job(on_start);
    if keys == 0 {
        return job;
    }
    job.concurrency_limit(ConcurrencyLimit::key(1, "event.payload.k"))
}

/// The job of `--held`: one run at once on a single key; a run lasts an hour (the drain's end
/// aborts it), so every other run of it stays queued behind the key's limit.
fn held_job() -> Job {
    Job::new(HELD_JOB, "Benchmark held backlog", "1.0.0")
        .trigger(event_trigger(HELD_EVENT))
        .concurrency_limit(ConcurrencyLimit::key(1, "'one'"))
        .run(|_: serde_json::Value, _io: Io| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, JobError>(serde_json::Value::Null)
        })
}

/// Stores `n` events with workers off (event `i` with the key `i % keys`); returns the seconds
/// it took.
async fn seed(client: &Client, n: usize, keys: usize) -> Result<f64, Error> {
    seed_events(client, EVENT, n, keys).await
}

/// Stores `n` events named `name` in batches (event `i` with the key `i % keys`).
pub(super) async fn seed_events(
    client: &Client,
    name: &str,
    n: usize,
    keys: usize,
) -> Result<f64, Error> {
    seed_events_keyed(client, name, n, |i| json!(i % keys.max(1))).await
}

/// [`seed_events`] with the key of event `i` given by `key`.
pub(super) async fn seed_events_keyed(
    client: &Client,
    name: &str,
    n: usize,
    key: impl Fn(usize) -> serde_json::Value,
) -> Result<f64, Error> {
    let start = Instant::now();
    let mut from = 0;
    while from < n {
        let to = (from + SEED_BATCH).min(n);
        let now = client.clock().now_ms();
        let batch = (from..to)
            .map(|i| NewEvent {
                id: format!("evt_{}_{i:08}", name.replace('.', "_")),
                name: name.to_string(),
                payload: json!({ "i": i, "k": key(i) }),
                context: None,
                source: "api".into(),
                parent_run_id: None,
                deliver_at: None,
                now,
            })
            .collect();
        client.store().event_insert_many(batch).await?;
        from = to;
    }
    Ok(start.elapsed().as_secs_f64())
}

async fn measure(args: &Args, url: &str, pb: &ProgressBar) -> Result<Sample, Error> {
    let n = args.events;
    let seeder = Client::builder(url).workers(false).connect().await?;
    seeder.register_job(drain_job(args.keys, |_| {})).await?;
    if args.held > 0 {
        seeder.register_job(held_job()).await?;
        seed_events(&seeder, HELD_EVENT, args.held, 1).await?;
    }
    let seed_secs = seed(&seeder, n, args.keys).await?;
    let queued = count(&seeder.store().run_counts().await?, RunStatus::Queued);
    if queued != (n + args.held) as u64 {
        seeder.shutdown().await;
        return Err(Error::Stalled(format!(
            "{} events were stored but {queued} runs are queued",
            n + args.held
        )));
    }

    let started = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&started);
    let start = Instant::now();
    let mut config = engine_config(args);
    if args.held > 0 {
        // The held job's one running run is aborted at the end, not waited for.
        config.shutdown_grace = Duration::from_millis(100);
    }
    let worker = Client::builder(url).config(config).connect().await?;
    worker.define_job(drain_job(args.keys, move |_| {
        s.fetch_add(1, Ordering::Relaxed);
    }))?;
    if args.held > 0 {
        worker.define_job(held_job())?;
    }
    let limit = Duration::from_secs(120).max(Duration::from_millis(n as u64));
    // Counting every run is a scan of the table: only once every run has started.
    let waited = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let ran = started.load(Ordering::Relaxed);
        pb.set_position(ran as u64);
        if ran >= n && count(&worker.store().run_counts().await?, RunStatus::Succeeded) >= n as u64
        {
            break Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            let counts = worker.store().run_counts().await?;
            break Err(Error::Stalled(format!(
                "drain did not finish in {limit:?}: {ran} of {n} started, counts {counts:?}"
            )));
        }
    };
    worker.shutdown().await;
    seeder.shutdown().await;
    let elapsed = waited?;
    Ok(Sample::from([
        ("events", n as f64),
        ("held", args.held as f64),
        ("seed_secs", seed_secs),
        ("seed_events_per_s", n as f64 / seed_secs),
        ("secs", elapsed.as_secs_f64()),
        ("runs_per_s", n as f64 / elapsed.as_secs_f64()),
    ]))
}
