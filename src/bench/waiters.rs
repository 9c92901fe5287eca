//! `flare bench waiters`: what runs waiting for events cost the senders of events. Issue 27 asks
//! that waiting costs no polling: with `--waiters` (100,000) runs waiting on distinct keys, the
//! send rate of matching and non-matching events stays within 10% of the rate without waiters
//! (the match is an index lookup).
//!
//! Each repetition, on a temporary SQLite file and (with `--database-url postgres://…`) on a fresh
//! PostgreSQL database per part:
//! - **no waiters**: a send-only client (workers off) and `--e2e-senders` concurrent senders
//!   (64) sending `bench.wait.match` events for `--send-secs` (after an uncounted warm-up of
//!   a fifth of that, at most 1 s), each with a key no run waits
//!   for; no job is triggered by them, so this is the event insert and its wait lookup alone;
//! - **the waiters**: `--waiters` `bench.wait.start` events stored in batches, each starting a run
//!   of a job that calls `io.wait_for_event("bench.wait.match")` matching `payload.k`, its own
//!   event's `k` (distinct), and a client with workers until every run waits (timed: waiters/s
//!   into the wait); then with workers off, the same senders send for `--send-secs` each:
//!   events of another name (`bench.wait.other`), non-matching `bench.wait.match` events (keys
//!   no run waits for), and matching ones (each the key of one waiting run, resuming it: checked
//!   by the runs due afterwards).
//!
//! Reported: each rate, and its ratio to the rate without waiters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::args::{Args, Error, Sample};
use super::backend::{Backend, Place};
use super::scenarios::{count, engine_config};
use crate::{event_trigger, Client, Io, Job, JobError, RunStatus, WaitFor};

const WAITER: &str = "bench-waiter";
const START_EVENT: &str = "bench.wait.start";
const MATCH_EVENT: &str = "bench.wait.match";
const OTHER_EVENT: &str = "bench.wait.other";

/// What the senders send: the name, and the key of sender `s`'s `i`-th event (`None`: no more).
type Keys = Arc<dyn Fn(usize, u64) -> Option<Value> + Send + Sync>;

/// One repetition on `backend`.
pub(super) async fn run(args: &Args, backend: Backend, pb: &ProgressBar) -> Result<Sample, Error> {
    let place = Place::new(args, backend, "flare_bench_nowait").await?;
    let base = baseline(args, place.url(), pb).await;
    place.remove().await;
    let base = base?;
    let place = Place::new(args, backend, "flare_bench_wait").await?;
    let waited = with_waiters(args, place.url(), pb).await;
    place.remove().await;
    let mut sample = waited?;
    for (rate, ratio) in [
        ("other_name_events_per_s", "other_name_ratio"),
        ("non_matching_events_per_s", "non_matching_ratio"),
        ("matching_events_per_s", "matching_ratio"),
    ] {
        let r = sample[rate] / base;
        sample.insert(ratio, r);
    }
    sample.insert("no_waiters_events_per_s", base);
    Ok(sample)
}

/// The job whose runs wait: for a `bench.wait.match` event whose `k` is their own event's.
fn waiter(reached: Arc<AtomicUsize>) -> Job {
    Job::new(WAITER, "Benchmark waiter", "1.0.0")
        .trigger(event_trigger(START_EVENT))
        .run(move |_p: Value, io: Io| {
            let reached = Arc::clone(&reached);
            async move {
                reached.fetch_add(1, Ordering::Relaxed);
                io.wait_for_event(
                    "match",
                    MATCH_EVENT,
                    WaitFor::timeout(Duration::from_secs(86_400)).matching("payload.k"),
                )
                .await?;
                Ok::<_, JobError>(Value::Null)
            }
        })
}

/// The send rate without waiters: non-matching keys on a database where no run waits.
async fn baseline(args: &Args, url: &str, pb: &ProgressBar) -> Result<f64, Error> {
    let client = Client::builder(url).workers(false).connect().await?;
    client.define_job(waiter(Arc::new(AtomicUsize::new(0))))?;
    let keys: Keys = Arc::new(|s, i| Some(json!(format!("none-{s}-{i}"))));
    let result = send(&client, args, MATCH_EVENT, keys, pb).await;
    client.shutdown().await;
    Ok(result?.0)
}

async fn with_waiters(args: &Args, url: &str, pb: &ProgressBar) -> Result<Sample, Error> {
    let n = args.waiters;
    let seeder = Client::builder(url).workers(false).connect().await?;
    seeder
        .register_job(waiter(Arc::new(AtomicUsize::new(0))))
        .await?;
    let start = Instant::now();
    // Event `i` has the key `i`: one waiter per key.
    super::drain::seed_events(&seeder, START_EVENT, n, n).await?;
    let reached = Arc::new(AtomicUsize::new(0));
    let worker = Client::builder(url)
        .config(engine_config(args))
        .connect()
        .await?;
    worker.define_job(waiter(Arc::clone(&reached)))?;
    let limit = Duration::from_secs(300).max(Duration::from_millis(2 * n as u64));
    let waiting = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let r = reached.load(Ordering::Relaxed);
        pb.set_position(r as u64);
        // Every run reached its wait, and its suspension was written (no run left running or due).
        if r >= n {
            let counts = worker.store().run_counts().await?;
            let due = worker
                .store()
                .runs_waiting(chrono::Utc::now())
                .await?
                .worker;
            if count(&counts, RunStatus::Running) == 0 && due == 0 {
                break Ok(start.elapsed());
            }
        }
        if start.elapsed() > limit {
            break Err(Error::Stalled(format!(
                "{r} of {n} runs reached their wait in {limit:?}"
            )));
        }
    };
    worker.shutdown().await;
    let into_wait = waiting?;

    let other: Keys = Arc::new(|s, i| Some(json!(format!("other-{s}-{i}"))));
    let (other_rate, _) = send(&seeder, args, OTHER_EVENT, other, pb).await?;
    let none: Keys = Arc::new(|s, i| Some(json!(format!("none-{s}-{i}"))));
    let (non_matching_rate, _) = send(&seeder, args, MATCH_EVENT, none, pb).await?;
    // Each matching event takes the next waiter's key (the seeded payload's `k`, a number).
    let next = Arc::new(AtomicUsize::new(0));
    let keys: Keys = Arc::new(move |_, _| {
        let k = next.fetch_add(1, Ordering::Relaxed);
        (k < n).then(|| json!(k))
    });
    let (matching_rate, matched) = send(&seeder, args, MATCH_EVENT, keys, pb).await?;
    let resumed = seeder
        .store()
        .runs_waiting(chrono::Utc::now())
        .await?
        .worker;
    seeder.shutdown().await;
    if resumed != matched {
        return Err(Error::Stalled(format!(
            "{matched} matching events were sent but {resumed} waiting runs were resumed"
        )));
    }
    Ok(Sample::from([
        ("waiters", n as f64),
        ("into_wait_secs", into_wait.as_secs_f64()),
        ("into_wait_per_s", n as f64 / into_wait.as_secs_f64()),
        ("other_name_events_per_s", other_rate),
        ("non_matching_events_per_s", non_matching_rate),
        ("matching_events_per_s", matching_rate),
        ("matched", matched as f64),
    ]))
}

/// `--e2e-senders` tasks sending `name` events with the keys `keys` gives them for
/// `--send-secs` (or until the keys run out), after a warm-up of a fifth of that (at most a
/// second) that is not counted; returns events/s and how many were sent in all.
async fn send(
    client: &Client,
    args: &Args,
    name: &'static str,
    keys: Keys,
    pb: &ProgressBar,
) -> Result<(f64, u64), Error> {
    let warm = (args.send_secs / 5.0).min(1.0);
    let from = Instant::now() + Duration::from_secs_f64(warm);
    let deadline = from + Duration::from_secs_f64(args.send_secs);
    let mut tasks = JoinSet::new();
    for sender in 0..args.e2e_senders {
        let (client, pb, keys) = (client.clone(), pb.clone(), Arc::clone(&keys));
        tasks.spawn(async move {
            let (mut i, mut counted) = (0u64, 0u64);
            while Instant::now() < deadline {
                let Some(k) = keys(sender, i) else { break };
                let t = Instant::now();
                client.send_event(name, &json!({ "k": k })).await?;
                i += 1;
                counted += u64::from(t >= from);
                pb.inc(1);
            }
            Ok::<_, Error>((i, counted, Instant::now()))
        });
    }
    let (mut sent, mut counted, mut end) = (0, 0, from);
    while let Some(done) = tasks.join_next().await {
        let (i, c, at) = done.map_err(|e| Error::Stalled(format!("a sender failed: {e}")))??;
        sent += i;
        counted += c;
        end = end.max(at);
    }
    let secs = end.saturating_duration_since(from).as_secs_f64();
    Ok((counted as f64 / secs.max(1e-9), sent))
}
