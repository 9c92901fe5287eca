//! `flare bench fan-in`: a fan-out / fan-in of `--children` runs (default 10,000) through
//! `io.invoke_all`, and beside it, in the same sitting, the plain drain of as many queued no-op
//! runs (`drain.rs`), on a temporary SQLite file and (with `--database-url postgres://…`) on a
//! fresh PostgreSQL database per repetition.
//!
//! Each repetition: a client with workers (`--concurrency`, `--claim-batch`) defines a no-op
//! child job and a parent job whose body calls `io.invoke_all` over `--children` payloads; one
//! event starts the parent, and the clock runs from that send until the store counts the parent
//! and every child `succeeded`. Reported: children per second, the seconds until the first child
//! started (the fan-out: the children and the parent's steps, on PostgreSQL with its waits, are
//! written in one transaction per 1,000) and until the last child's body ran, the fan-in's own
//! seconds (`fan_in_secs`: from the last child's body to the parent's body holding every output:
//! that child's completion, the parent made due, claimed and its steps read), and how many times
//! the parent's body ran (2: before its wait and once after the last child ended); beside the
//! plain drain, the fan-in's rate over the drain's and over the drain's counting the writing of
//! its events, and the megabytes each left stored (`stored_mb`, read after the clock stopped)
//! with their ratio (`compare`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};

use super::args::{Args, Error, Sample};
use super::backend::{Backend, Place};
use super::scenarios::{count, engine_config};
use crate::{event_trigger, Client, Io, Job, JobError, RunStatus};

const PARENT: &str = "bench-fan";
const PARENT_EVENT: &str = "bench.fan";
const CHILD: &str = "bench-fan-child";

/// What the jobs of one repetition record.
#[derive(Default)]
struct Seen {
    children: AtomicUsize,
    first_child: OnceLock<Instant>,
    /// When the last child's body ran.
    last_child: OnceLock<Instant>,
    /// When the parent's body got every output.
    outputs: OnceLock<Instant>,
    executions: AtomicUsize,
    fanned_in: AtomicBool,
}

/// One repetition on `backend`.
pub(super) async fn run(args: &Args, backend: Backend, pb: &ProgressBar) -> Result<Sample, Error> {
    let place = Place::new(args, backend, "flare_bench_fan").await?;
    let mut result = measure(args, place.url(), pb).await;
    if let Ok(sample) = &mut result {
        sample.insert("stored_mb", place.stored_mb().await);
    }
    place.remove().await;
    result
}

/// The plain drain of as many no-op runs as `--children`, on `backend`: the figure the fan-in is
/// compared with.
pub(super) async fn plain(
    args: &Args,
    backend: Backend,
    pb: &ProgressBar,
) -> Result<Sample, Error> {
    let mut drain = args.clone();
    drain.events = args.children;
    drain.keys = 0;
    drain.held = 0;
    super::drain::run(&drain, backend, pb).await
}

/// Adds the comparison of one repetition's fan-in with its plain drain: the drain's rate counting
/// the writing of its events too (`seeded_drain_per_s`: the fan-in's clock covers writing its
/// children), the fan-in's rate over each (`vs_drain`, `vs_seeded_drain`), and the bytes each
/// left stored (`vs_drain_stored`: a child's run and event carry its caller, step and source).
pub(super) fn compare(fan: &mut Sample, drain: &mut Sample) {
    let get = |s: &Sample, k: &str| s.get(k).copied().unwrap_or(f64::NAN);
    let seeded = get(drain, "events") / (get(drain, "seed_secs") + get(drain, "secs"));
    drain.insert("seeded_drain_per_s", seeded);
    let children = get(fan, "children_per_s");
    fan.insert("vs_drain", children / get(drain, "runs_per_s"));
    fan.insert("vs_seeded_drain", children / seeded);
    // What the fan-in wrote for its runs against what the seeded drain wrote for as many.
    fan.insert(
        "vs_drain_stored",
        get(fan, "stored_mb") / get(drain, "stored_mb"),
    );
}

fn child(n: usize, seen: Arc<Seen>) -> Job {
    Job::new(CHILD, "Benchmark fan-in child", "1.0.0")
        .trigger(event_trigger("bench.fan.child"))
        .run(move |_p: Value, _io: Io| {
            let seen = Arc::clone(&seen);
            async move {
                let _ = seen.first_child.set(Instant::now());
                if seen.children.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    let _ = seen.last_child.set(Instant::now());
                }
                Ok::<_, JobError>(Value::Null)
            }
        })
}

fn parent(n: usize, seen: Arc<Seen>) -> Job {
    Job::new(PARENT, "Benchmark fan-in parent", "1.0.0")
        .trigger(event_trigger(PARENT_EVENT))
        .run(move |_p: Value, io: Io| {
            let seen = Arc::clone(&seen);
            async move {
                seen.executions.fetch_add(1, Ordering::Relaxed);
                let payloads: Vec<Value> = (0..n).map(|i| json!({ "i": i })).collect();
                let outputs: Vec<Value> = io
                    .invoke_all("children", CHILD, &payloads, Duration::from_secs(3600))
                    .await?;
                let _ = seen.outputs.set(Instant::now());
                seen.fanned_in.store(true, Ordering::Relaxed);
                Ok::<_, JobError>(json!(outputs.len()))
            }
        })
}

async fn measure(args: &Args, url: &str, pb: &ProgressBar) -> Result<Sample, Error> {
    let n = args.children;
    let client = Client::builder(url)
        .config(engine_config(args))
        .connect()
        .await?;
    let seen = Arc::new(Seen::default());
    client.register_job(child(n, Arc::clone(&seen))).await?;
    client.register_job(parent(n, Arc::clone(&seen))).await?;
    let start = Instant::now();
    client.send_event(PARENT_EVENT, &json!({})).await?;
    let limit = Duration::from_secs(120).max(Duration::from_millis(10 * n as u64));
    let waited = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        pb.set_position(seen.children.load(Ordering::Relaxed) as u64);
        // Counting every run is a scan of the table: only once the parent got every output.
        if seen.fanned_in.load(Ordering::Relaxed)
            && count(&client.store().run_counts().await?, RunStatus::Succeeded) > n as u64
        {
            break Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            let counts = client.store().run_counts().await?;
            break Err(Error::Stalled(format!(
                "fan-in did not finish in {limit:?}: {} of {n} children ran, counts {counts:?}",
                seen.children.load(Ordering::Relaxed)
            )));
        }
    };
    client.shutdown().await;
    let elapsed = waited?;
    let since = |t: &OnceLock<Instant>, from: Instant| {
        t.get()
            .map_or(f64::NAN, |t| t.duration_since(from).as_secs_f64())
    };
    let first = since(&seen.first_child, start);
    let last = seen.last_child.get().copied();
    Ok(Sample::from([
        ("children", n as f64),
        ("secs", elapsed.as_secs_f64()),
        ("children_per_s", n as f64 / elapsed.as_secs_f64()),
        ("first_child_secs", first),
        ("last_child_secs", since(&seen.last_child, start)),
        (
            "fan_in_secs",
            last.map_or(f64::NAN, |last| since(&seen.outputs, last)),
        ),
        (
            "parent_executions",
            seen.executions.load(Ordering::Relaxed) as f64,
        ),
    ]))
}
