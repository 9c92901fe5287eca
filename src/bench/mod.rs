//! `flare bench`: measures this build on this machine.
//!
//! Scenarios (each on a fresh temporary SQLite database, durable: WAL + `synchronous=FULL`):
//! - **send**: [`Client::send_event`](crate::Client::send_event) throughput, each event starting
//!   one no-op run, with 1 and with 64 concurrent senders, workers off (ingest only);
//! - **e2e**: no-op runs per second from the first send until the last run is `succeeded`, workers
//!   on;
//! - **drain**: `--events` no-op runs already queued (stored with workers off), then workers
//!   started: runs/s from their start until the last run is `succeeded`, and the seeding rate;
//!   in `all` on SQLite, as `drain` also on PostgreSQL with `--database-url postgres://…` (see
//!   `src/bench/drain.rs`);
//! - **latency**: send → run-start latency at a paced rate (default 1,000 events/s for 10 s);
//! - **memory**: resident memory of an idle `flare serve` (the real binary on a temp database);
//! - **dashboard** (not part of `all`): seeds `--events` events with their runs, then times the
//!   dashboard's pages through the router (see `src/bench/dashboard.rs`).
//! - **endpoint** (not part of `all`): no-op runs through an HTTP job endpoint in another process
//!   (see `src/bench/endpoint.rs`): runs/s, CPU per run, send → start latency.
//! - **steps** (not part of `all`): end-to-end runs whose job does 0, 1, 5 (`--steps`) no-op
//!   `io.run_task` steps, on SQLite and, with `--database-url postgres://…`, on PostgreSQL: runs/s
//!   and the latency of a step call (see `src/bench/steps.rs`).
//! - **fan-in** (not part of `all`): a parent job invoking `--children` (10,000) no-op runs with
//!   `io.invoke_all`, from its event to the parent's success, beside the plain drain of as many
//!   queued runs, on SQLite and, with `--database-url postgres://…`, PostgreSQL: children/s and
//!   drain runs/s side by side (see `src/bench/fan_in.rs`).
//! - **waiters** (not part of `all`): the send rate with `--waiters` (100,000) runs waiting in
//!   `io.wait_for_event` on keys of their own, for events matching none of them and events each
//!   matching one, beside the rate without waiters (and, alternated on the waiters' database,
//!   events of a name no run waits for), on SQLite and, with `--database-url postgres://…`,
//!   PostgreSQL (see `src/bench/waiters.rs`).
//! - **soak** (not part of `all`): a real `flare serve` under `--rate` sends/s and dashboard reads
//!   for `--soak-secs`, sampled every `--sample-secs` (see `src/bench/soak.rs`).
//! - **pg-scale** (only when asked for, on `--database-url`): `flare worker` processes sharing one
//!   database, 1, 2, 4… of them (`--workers`): drain throughput of pre-stored no-op events and
//!   send → start latency across processes (see `scale`).
//!
//! Every scenario is repeated (default 3×); the report gives the median and the min–max, the load
//! average seen at the start of each repetition, and the peak resident memory of this process
//! during the repetition (`VmHWM`, reset before each one). Output is a table, or with `--json` one
//! JSON line per scenario variant.

mod args;
mod backend;
mod dashboard;
mod drain;
mod endpoint;
mod fan_in;
mod report;
mod scale;
mod scenarios;
mod soak;
mod steps;
mod waiters;

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use args::db_url;
pub use args::{Args, Error, Sample, Scenario};
pub use report::Figure;
pub use scenarios::worker_noop_job as noop_job;

/// Runs the selected scenarios and prints the report. Returns the figures.
pub async fn run(args: Args) -> Result<Vec<Figure>, Error> {
    if args.scenario == Scenario::EndpointServer {
        endpoint::serve_endpoint().await?;
        return Ok(Vec::new());
    }
    if args.scenario == Scenario::Soak {
        soak::run(&args).await?;
        return Ok(Vec::new());
    }
    let want = |s: Scenario| args.scenario == s || args.scenario == Scenario::All;
    let reps = args.reps.max(1);
    // The first client connected becomes the process-wide default and lives until exit. Let that
    // be a small idle one, so every measured client is dropped after its scenario.
    let anchor_dir = tempfile::tempdir()?;
    let _anchor = crate::Client::builder(&db_url(anchor_dir.path()))
        .workers(false)
        .connect()
        .await?;

    let mut figures = Vec::new();
    if want(Scenario::Send) {
        for senders in [1usize, 64] {
            let settings =
                serde_json::json!({ "senders": senders, "secs": args.send_secs, "workers": false });
            let mut samples = Vec::new();
            for rep in 0..reps {
                let pb = bar(
                    format!("send, {senders} sender(s), rep {}/{reps}", rep + 1),
                    None,
                );
                samples.push(measured(scenarios::send(senders, args.send_secs, &pb)).await?);
                pb.finish_and_clear();
            }
            figures.push(emit(
                &args,
                Figure::new("send", format!("{senders} senders"), settings, samples),
            ));
        }
    }
    let engine = serde_json::json!({
        "concurrency": args.concurrency,
        "claim_batch": args.claim_batch,
        "poll_interval_ms": 200,
    });
    if want(Scenario::E2e) {
        let settings = serde_json::json!({ "events": args.events, "senders": args.e2e_senders, "engine": engine });
        let mut samples = Vec::new();
        for rep in 0..reps {
            let pb = bar(
                format!("e2e, rep {}/{reps}", rep + 1),
                Some(args.events as u64),
            );
            samples.push(measured(scenarios::e2e(&args, &pb)).await?);
            pb.finish_and_clear();
        }
        figures.push(emit(
            &args,
            Figure::new("e2e", format!("{} events", args.events), settings, samples),
        ));
    }
    if want(Scenario::Drain) {
        let backends = match args.scenario {
            Scenario::Drain => backend::Backend::selected(&args),
            _ => vec![backend::Backend::Sqlite],
        };
        for backend in backends {
            let settings = serde_json::json!({
                "store": backend.name(), "events": args.events, "engine": engine, "keys": args.keys,
                "held": args.held,
            });
            let mut samples = Vec::new();
            for rep in 0..reps {
                let pb = bar(
                    format!("drain, {}, rep {}/{reps}", backend.name(), rep + 1),
                    Some(args.events as u64),
                );
                samples.push(measured(drain::run(&args, backend, &pb)).await?);
                pb.finish_and_clear();
            }
            figures.push(emit(
                &args,
                Figure::new(
                    "drain",
                    drain_label(&args, backend.name()),
                    settings,
                    samples,
                ),
            ));
        }
    }
    if want(Scenario::Latency) {
        let settings = serde_json::json!({ "rate": args.latency_rate, "secs": args.latency_secs, "engine": engine });
        let total = u64::from(args.latency_rate) * args.latency_secs;
        let mut samples = Vec::new();
        for rep in 0..reps {
            let pb = bar(format!("latency, rep {}/{reps}", rep + 1), Some(total));
            samples.push(measured(scenarios::latency(&args, &pb)).await?);
            pb.finish_and_clear();
        }
        figures.push(emit(
            &args,
            Figure::new(
                "latency",
                format!("{}/s", args.latency_rate),
                settings,
                samples,
            ),
        ));
    }
    if want(Scenario::Memory) {
        let bin = match &args.flare_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?,
        };
        let settings =
            serde_json::json!({ "idle_secs": args.idle_secs, "binary": bin.display().to_string() });
        let mut samples = Vec::new();
        for rep in 0..reps {
            let pb = bar(format!("memory, rep {}/{reps}", rep + 1), None);
            samples.push(measured(scenarios::idle_memory(&bin, args.idle_secs)).await?);
            pb.finish_and_clear();
        }
        figures.push(emit(
            &args,
            Figure::new("memory", "idle flare serve".into(), settings, samples),
        ));
    }
    if args.scenario == Scenario::Dashboard {
        let pb = bar(
            format!("dashboard: seeding {} events", args.events),
            Some(args.events as u64),
        );
        figures.extend(dashboard::run(&args, &pb).await?);
        return Ok(figures);
    }
    if args.scenario == Scenario::PgScale {
        figures.extend(pg_scale(&args, reps).await?);
    }
    if args.scenario == Scenario::Steps {
        let backends = backend::Backend::selected(&args);
        for backend in backends {
            for &k in &args.steps {
                let settings = serde_json::json!({
                    "store": backend.name(), "steps_per_run": k, "events": args.events,
                    "senders": args.e2e_senders, "engine": engine,
                });
                let mut samples = Vec::new();
                for rep in 0..reps {
                    let pb = bar(
                        format!(
                            "steps, {}, {k} per run, rep {}/{reps}",
                            backend.name(),
                            rep + 1
                        ),
                        Some(args.events as u64),
                    );
                    samples.push(measured(steps::run(&args, backend, k, &pb)).await?);
                    pb.finish_and_clear();
                }
                figures.push(emit(
                    &args,
                    Figure::new(
                        "steps",
                        format!("{}, {k} steps/run", backend.name()),
                        settings,
                        samples,
                    ),
                ));
            }
        }
    }
    if args.scenario == Scenario::FanIn {
        for backend in backend::Backend::selected(&args) {
            let settings = serde_json::json!({
                "store": backend.name(), "children": args.children, "engine": engine,
            });
            let (mut fanned, mut drained) = (Vec::new(), Vec::new());
            for rep in 0..reps {
                let what = format!("{}, rep {}/{reps}", backend.name(), rep + 1);
                let pb = bar(format!("fan-in, {what}"), Some(args.children as u64));
                let mut fan = measured(fan_in::run(&args, backend, &pb)).await?;
                pb.finish_and_clear();
                let pb = bar(
                    format!("fan-in's plain drain, {what}"),
                    Some(args.children as u64),
                );
                let mut drain = measured(fan_in::plain(&args, backend, &pb)).await?;
                pb.finish_and_clear();
                fan_in::compare(&mut fan, &mut drain);
                fanned.push(fan);
                drained.push(drain);
            }
            let n = args.children;
            figures.push(emit(
                &args,
                Figure::new(
                    "fan-in",
                    format!("{}, {n} children", backend.name()),
                    settings.clone(),
                    fanned,
                ),
            ));
            figures.push(emit(
                &args,
                Figure::new(
                    "fan-in drain",
                    format!("{}, plain drain of {n}", backend.name()),
                    settings,
                    drained,
                ),
            ));
        }
    }
    if args.scenario == Scenario::Waiters {
        for backend in backend::Backend::selected(&args) {
            let settings = serde_json::json!({
                "store": backend.name(), "waiters": args.waiters, "events": args.events,
                "senders": args.e2e_senders, "engine": engine,
                "keys": if args.scattered_keys { "scattered" } else { "consecutive" },
            });
            let mut samples = Vec::new();
            for rep in 0..reps {
                let pb = bar(
                    format!("waiters, {}, rep {}/{reps}", backend.name(), rep + 1),
                    Some(args.waiters as u64),
                );
                samples.push(measured(waiters::run(&args, backend, &pb)).await?);
                pb.finish_and_clear();
            }
            figures.push(emit(
                &args,
                Figure::new(
                    "waiters",
                    format!("{}, {} waiting", backend.name(), args.waiters),
                    settings,
                    samples,
                ),
            ));
        }
    }
    if args.scenario == Scenario::Endpoint {
        let settings = serde_json::json!({
            "events": args.events, "senders": args.e2e_senders, "engine": engine,
            "latency_rate": args.latency_rate, "latency_secs": args.latency_secs,
            "endpoint": args.endpoint_cmd.as_deref().unwrap_or("built-in (Rust, axum)"),
        });
        let (mut runs, mut latencies) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            let pb = bar(
                format!("endpoint runs, rep {}/{reps}", rep + 1),
                Some(args.events as u64),
            );
            runs.push(measured(endpoint::throughput(&args, &pb)).await?);
            pb.finish_and_clear();
            let total = u64::from(args.latency_rate) * args.latency_secs;
            let pb = bar(
                format!("endpoint latency, rep {}/{reps}", rep + 1),
                Some(total),
            );
            latencies.push(measured(endpoint::latency(&args, &pb)).await?);
            pb.finish_and_clear();
        }
        figures.push(emit(
            &args,
            Figure::new(
                "endpoint",
                format!("{} events", args.events),
                settings.clone(),
                runs,
            ),
        ));
        figures.push(emit(
            &args,
            Figure::new(
                "endpoint latency",
                format!("{}/s", args.latency_rate),
                settings,
                latencies,
            ),
        ));
    }
    if !args.json {
        print!("{}", report::table(&figures));
    }
    Ok(figures)
}

/// The multi-process scenario for each worker count: drain, then latency.
async fn pg_scale(args: &Args, reps: usize) -> Result<Vec<Figure>, Error> {
    let url = args
        .database_url
        .clone()
        .ok_or_else(|| Error::Stalled("pg-scale needs --database-url (or DATABASE_URL)".into()))?;
    let bin = match &args.flare_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?,
    };
    let mut figures = Vec::new();
    for &n in &args.workers {
        let settings = serde_json::json!({
            "workers": n, "events": args.events, "worker_concurrency": args.concurrency,
            "latency_rate": args.latency_rate, "latency_secs": args.latency_secs,
        });
        let mut drains = Vec::new();
        let mut latencies = Vec::new();
        for rep in 0..reps {
            let pb = bar(
                format!("pg-scale drain, {n} worker(s), rep {}/{reps}", rep + 1),
                Some(args.events as u64),
            );
            drains.push(measured(scale::drain(args, &bin, &url, n, &pb)).await?);
            pb.finish_and_clear();
            let total = u64::from(args.latency_rate) * args.latency_secs;
            let pb = bar(
                format!("pg-scale latency, {n} worker(s), rep {}/{reps}", rep + 1),
                Some(total),
            );
            latencies.push(measured(scale::latency(args, &bin, &url, n, &pb)).await?);
            pb.finish_and_clear();
        }
        figures.push(emit(
            args,
            Figure::new(
                "pg-scale drain",
                format!("{n} workers"),
                settings.clone(),
                drains,
            ),
        ));
        figures.push(emit(
            args,
            Figure::new(
                "pg-scale latency",
                format!("{n} workers, {}/s", args.latency_rate),
                settings,
                latencies,
            ),
        ));
    }
    Ok(figures)
}

/// Runs one repetition with the load average and this process's peak memory recorded around it.
async fn measured(
    f: impl std::future::Future<Output = Result<Sample, Error>>,
) -> Result<Sample, Error> {
    let load = report::load_average();
    report::reset_peak_memory();
    let mut sample = f.await?;
    sample.insert("load1", load);
    if let Some(kb) = report::proc_status_kb("self", "VmHWM") {
        sample.insert("bench_peak_rss_mb", kb as f64 / 1024.0);
    }
    Ok(sample)
}

fn emit(args: &Args, figure: Figure) -> Figure {
    if args.json {
        println!("{}", figure.json_line());
    }
    figure
}

fn bar(message: String, len: Option<u64>) -> ProgressBar {
    let pb = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    let template = if len.is_some() {
        "{msg} [{bar:30}] {pos}/{len} {per_sec}"
    } else {
        "{spinner} {msg} {pos} {per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(message);
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// The drain figure's label: its store, size, and flow control.
fn drain_label(args: &Args, store: &str) -> String {
    let mut label = format!("{store}, {} events", args.events);
    if args.keys > 0 {
        label += &format!(", 1 at once per key over {} keys", args.keys);
    }
    if args.held > 0 {
        label += &format!(", beside {} runs held by one key at its limit", args.held);
    }
    label
}
