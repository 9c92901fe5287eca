//! The cost of durable steps (`flare bench steps`): end-to-end runs whose job does `k` no-op
//! `io.run_task` steps, for each `k` of `--steps` (default 0, 1 and 5), on a temporary SQLite
//! database and, with `--database-url postgres://…`, on a fresh PostgreSQL database created on
//! that server for each repetition (and dropped after it).
//!
//! Each repetition sends `--events` events from `--e2e-senders` tasks with the workers on and is
//! timed from the first send until every run is `succeeded`. Inside the job each `run_task` call
//! is timed: the first step of an execution also reads the run's steps (once per execution), the
//! next ones only write theirs. The throughput difference between `k` and 0 steps is the store
//! capacity a step takes; the call latencies are what a job waits for one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::args::{Args, Error, Sample};
use super::backend::{Backend, Place};
use super::report::quantile;
use crate::{event_trigger, Client, EngineConfig, Io, Job, JobError, RunStatus};

const EVENT: &str = "bench.steps";
const JOB: &str = "bench-steps";

/// Step-call latencies (ms) of one repetition: the first step of each execution, the others.
#[derive(Default)]
struct Latencies {
    first: Vec<f64>,
    next: Vec<f64>,
}

fn job(steps: usize, latencies: Arc<Mutex<Latencies>>, done: Arc<AtomicUsize>) -> Job {
    let keys: Arc<Vec<String>> = Arc::new((0..steps).map(|i| format!("step-{i}")).collect());
    Job::new(JOB, "Benchmark steps", "1.0.0")
        .trigger(event_trigger(EVENT))
        .run(move |_p: Value, io: Io| {
            let (keys, latencies, done) =
                (Arc::clone(&keys), Arc::clone(&latencies), Arc::clone(&done));
            async move {
                let mut took = Vec::with_capacity(keys.len());
                for key in keys.iter() {
                    let t = Instant::now();
                    io.run_task(key, || async { Ok::<_, JobError>(()) }).await?;
                    took.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                if let (Some((first, next)), Ok(mut l)) = (took.split_first(), latencies.lock()) {
                    l.first.push(*first);
                    l.next.extend_from_slice(next);
                }
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, JobError>(Value::Null)
            }
        })
}

/// One repetition with `steps` no-op steps per run on `backend`.
pub(super) async fn run(
    args: &Args,
    backend: Backend,
    steps: usize,
    pb: &ProgressBar,
) -> Result<Sample, Error> {
    let place = Place::new(args, backend, "flare_bench_steps").await?;
    let result = measure(args, place.url(), steps, pb).await;
    place.remove().await;
    result
}

async fn measure(args: &Args, url: &str, steps: usize, pb: &ProgressBar) -> Result<Sample, Error> {
    let n = args.events;
    let client = Client::builder(url)
        .config(EngineConfig {
            concurrency: args.concurrency,
            claim_batch: args.claim_batch,
            ..EngineConfig::default()
        })
        .connect()
        .await?;
    let latencies = Arc::new(Mutex::new(Latencies::default()));
    let done = Arc::new(AtomicUsize::new(0));
    client.define_job(job(steps, Arc::clone(&latencies), Arc::clone(&done)))?;
    // Let the job's definition be stored before the clock starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..args.e2e_senders.max(1) {
        let (client, next) = (client.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, Error>(());
                }
                client.send_event(EVENT, &json!({ "i": i })).await?;
            }
        });
    }
    let limit = Duration::from_secs(300).max(Duration::from_millis(10 * n as u64));
    let elapsed = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let ran = done.load(Ordering::Relaxed);
        pb.set_position(ran as u64);
        if ran >= n {
            let counts = client.store().run_counts().await?;
            if counts.get(&RunStatus::Succeeded).copied().unwrap_or(0) >= n as u64 {
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
                "steps did not finish in {limit:?}: {ran} of {n} ran, counts {counts:?}"
            )));
        }
    };
    while let Some(sent) = tasks.join_next().await {
        sent.map_err(|e| Error::Stalled(format!("a sender failed: {e}")))??;
    }
    client.shutdown().await;
    let mut sample = Sample::from([
        ("events", n as f64),
        ("steps_per_run", steps as f64),
        ("secs", elapsed.as_secs_f64()),
        ("runs_per_s", n as f64 / elapsed.as_secs_f64()),
        ("steps_per_s", (n * steps) as f64 / elapsed.as_secs_f64()),
    ]);
    let mut l = std::mem::take(
        &mut *latencies
            .lock()
            .map_err(|_| Error::Stalled("poisoned".into()))?,
    );
    l.first.sort_by(f64::total_cmp);
    l.next.sort_by(f64::total_cmp);
    if !l.first.is_empty() {
        sample.insert("first_step_p50_ms", quantile(&l.first, 0.5));
        sample.insert("first_step_p99_ms", quantile(&l.first, 0.99));
    }
    if !l.next.is_empty() {
        sample.insert("next_step_p50_ms", quantile(&l.next, 0.5));
        sample.insert("next_step_p99_ms", quantile(&l.next, 0.99));
    }
    Ok(sample)
}
