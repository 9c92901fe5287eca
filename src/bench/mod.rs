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
//! - **soak** (not part of `all`): a real `flare serve` under `--rate` sends/s and dashboard reads
//!   for `--soak-secs`, sampled every `--sample-secs` (see `src/bench/soak.rs`).
//! - **pg-scale** (only when asked for, on `--database-url`): `flare worker` processes sharing one
//!   database, 1, 2, 4… of them (`--workers`): drain throughput of pre-stored no-op events and
//!   send → start latency across processes (see [`scale`]).
//!
//! Every scenario is repeated (default 3×); the report gives the median and the min–max, the load
//! average seen at the start of each repetition, and the peak resident memory of this process
//! during the repetition (`VmHWM`, reset before each one). Output is a table, or with `--json` one
//! JSON line per scenario variant.

mod backend;
mod dashboard;
mod drain;
mod endpoint;
mod report;
mod scale;
mod scenarios;
mod soak;
mod steps;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub use report::Figure;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client failed (store could not open, a send failed, …).
    #[error(transparent)]
    Client(#[from] crate::client::Error),
    /// The store failed a query.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    /// A temp directory, `/proc` or the child process failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The work did not finish in time or a count came out wrong.
    #[error("{0}")]
    Stalled(String),
}

/// Which scenarios to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Send throughput, 1 and 64 senders, workers off.
    Send,
    /// End-to-end no-op runs per second, workers on.
    E2e,
    /// Runs per second emptying `--events` queued no-op runs, from the workers' start to the last
    /// completion, and the seeding rate; on SQLite, and on PostgreSQL too with `--database-url`
    /// (in `all`: SQLite only).
    Drain,
    /// Send → run-start latency at a paced rate.
    Latency,
    /// Idle memory of `flare serve`.
    Memory,
    /// Server time of the dashboard's pages over `--events` seeded events (not part of `all`).
    Dashboard,
    /// All of the above except dashboard and pg-scale (drain on SQLite only).
    All,
    /// Worker processes on a shared database (`--database-url`, `--workers`): drain
    /// throughput and send → start latency.
    PgScale,
    /// No-op runs through an HTTP job endpoint in another process: runs/s, CPU per run of Flare
    /// and of the endpoint, send → start latency (not part of `all`).
    Endpoint,
    /// End-to-end runs doing `--steps` no-op `io.run_task` steps each, on SQLite and (with
    /// `--database-url`) PostgreSQL: the cost of a durable step (not part of `all`).
    Steps,
    /// A long mixed load on a real `flare serve`: `--rate` sends/s and dashboard reads for
    /// `--soak-secs`, sampling memory, WAL size and latency (not part of `all`).
    Soak,
    /// The endpoint process of the `endpoint` scenario (started by it).
    #[value(hide = true)]
    EndpointServer,
}

/// `flare bench` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Scenario to run.
    #[arg(value_enum, default_value = "all")]
    pub scenario: Scenario,
    /// Repetitions of each scenario; the report gives the median and min–max.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds each send measurement lasts.
    #[arg(long, default_value_t = 5.0)]
    pub send_secs: f64,
    /// Events of the end-to-end and drain scenarios (each starts one no-op run).
    #[arg(long, default_value_t = 100_000)]
    pub events: usize,
    /// Concurrent senders in the end-to-end scenario.
    #[arg(long, default_value_t = 64)]
    pub e2e_senders: usize,
    /// Engine concurrency (runs executing at once) for e2e, drain and latency.
    #[arg(long, default_value_t = 1000)]
    pub concurrency: usize,
    /// Engine claim batch (most runs claimed per transaction) for e2e, drain and latency.
    #[arg(long, default_value_t = 1000)]
    pub claim_batch: usize,
    /// Events per second in the latency scenario.
    #[arg(long, default_value_t = 1000)]
    pub latency_rate: u32,
    /// Seconds the latency scenario sends for.
    #[arg(long, default_value_t = 10)]
    pub latency_secs: u64,
    /// Seconds `flare serve` idles before its memory is read.
    #[arg(long, default_value_t = 3)]
    pub idle_secs: u64,
    /// The `flare` binary for the memory scenario (default: this executable).
    #[arg(long)]
    pub flare_bin: Option<PathBuf>,
    /// Requests per page in the dashboard scenario (after one warm-up request).
    #[arg(long, default_value_t = 9)]
    pub requests: usize,
    /// pg-scale: the shared database (e.g. postgres://postgres@127.0.0.1:5432/flare_bench).
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// pg-scale: numbers of worker processes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// endpoint: run this shell command as the endpoint instead of the built-in Rust one. It gets
    /// the secret in `FLARE_ENDPOINT_SECRET`, must print `listening HOST:PORT` and serve the job
    /// `bench-noop` on `bench.noop` at `/flare` (e.g. `node benchmarks/endpoint-noop.mjs`).
    #[arg(long)]
    pub endpoint_cmd: Option<String>,
    /// soak: how long, seconds.
    #[arg(long, default_value_t = 1800)]
    pub soak_secs: u64,
    /// soak: `POST /trigger` per second.
    #[arg(long, default_value_t = 500)]
    pub rate: u32,
    /// soak: seconds between two samples.
    #[arg(long, default_value_t = 30)]
    pub sample_secs: u64,
    /// steps: the numbers of no-op steps per run to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
    pub steps: Vec<usize>,
    /// One JSON line per scenario variant on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The no-op job of the multi-process scenario, run by `flare worker --bench-job`: `bench-noop`
/// on `bench.noop`, like the in-process scenarios' job. When the payload carries `sentAtUs`
/// (wall-clock microseconds just before the send), its output is `{"latencyUs": start − sent}`,
/// so send → start latency can be measured across processes; otherwise its output is null.
pub fn noop_job() -> crate::Job {
    crate::Job::new(scenarios::JOB, "Benchmark no-op", "1.0.0")
        .trigger(crate::event_trigger(scenarios::EVENT))
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

/// One repetition's figures, by metric name.
pub type Sample = BTreeMap<&'static str, f64>;

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
                "store": backend.name(), "events": args.events, "engine": engine,
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
                    format!("{}, {} events", backend.name(), args.events),
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

fn db_url(dir: &std::path::Path) -> String {
    format!("sqlite://{}/flare.db", dir.display())
}
