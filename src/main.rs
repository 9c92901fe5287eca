//! The `flare` command: `serve` runs the service; the rest talk to it or measure it.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use flare::config::{RawServe, RawWorker};

#[derive(Parser)]
#[command(
    name = "flare",
    version,
    about = "Events, background jobs, webhooks and a dashboard in one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service: HTTP API, dashboard, scheduler and workers with the reference jobs.
    Serve(ServeArgs),
    /// Run jobs without the HTTP server: workers, scheduler, rescuer and pruner on a shared
    /// database (scale-out: start as many as you need next to one `flare serve`).
    Worker(WorkerArgs),
    /// Measure send throughput, end-to-end throughput, latency and memory on temp databases.
    Bench(flare::bench::Args),
    /// Send an event through a running server (POST /trigger; FLARE_API_KEY as Bearer key).
    Send(SendArgs),
}

#[derive(clap::Args)]
struct SendArgs {
    /// Event name, e.g. user.created.
    name: String,
    /// Payload as JSON.
    #[arg(long)]
    payload: Option<String>,
    /// Deliver later, e.g. 90s, 15m, 2h, 1d, 1h30m.
    #[arg(long)]
    delay: Option<String>,
    /// The server.
    #[arg(long, env = "FLARE_URL", default_value = "http://127.0.0.1:3000")]
    url: String,
}

/// The engine's settings, the same for `serve` and `worker`.
#[derive(clap::Args)]
struct EngineArgs {
    /// Database URL (sqlite://PATH or postgres://…), shared by every node of a deployment.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://flare.db")]
    database_url: String,
    /// Runs executing at once in this process.
    #[arg(long, env = "FLARE_CONCURRENCY", default_value_t = 100)]
    concurrency: usize,
    /// Delete finished events older than this many days (0 keeps everything).
    #[arg(long, env = "FLARE_RETENTION_DAYS", default_value_t = 7)]
    retention_days: u64,
    /// Lease of a claimed run, in seconds: a run whose process died is retried after this.
    #[arg(long, env = "FLARE_LEASE_SECS", default_value_t = 30)]
    lease_secs: u64,
    /// Seconds running jobs get to finish on SIGTERM/SIGINT.
    #[arg(long, env = "FLARE_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    shutdown_grace_secs: u64,
}

#[derive(clap::Args)]
struct WorkerArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Also run the no-op job of `flare bench` (for the multi-process benchmark).
    #[arg(long, hide = true)]
    bench_job: bool,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "FLARE_LISTEN", default_value = "127.0.0.1:3000")]
    listen: String,
    #[command(flatten)]
    engine: EngineArgs,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "FLARE_MAX_BODY_BYTES", default_value_t = flare::http::body::DEFAULT_BODY_LIMIT)]
    max_body_bytes: usize,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,flare=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("flare: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause whose text the line already shows
/// (errors that print their source would otherwise repeat it).
fn one_line(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Worker(args) => worker(args).await,
            Command::Send(args) => send(args).await,
            Command::Bench(args) => flare::bench::run(args)
                .await
                .map(|_| ExitCode::SUCCESS)
                .context("benchmark failed"),
        }
    })
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = RawServe {
        listen: args.listen,
        database_url: args.engine.database_url,
        api_key: std::env::var("FLARE_API_KEY").ok(),
        stripe_secrets: std::env::var("STRIPE_WEBHOOK_SECRET").ok(),
        clerk_secrets: std::env::var("CLERK_WEBHOOK_SECRET").ok(),
        concurrency: args.engine.concurrency,
        retention_days: args.engine.retention_days,
        lease_secs: args.engine.lease_secs,
        shutdown_grace_secs: args.engine.shutdown_grace_secs,
        max_body_bytes: Some(args.max_body_bytes),
        demo: true,
        ..RawServe::default()
    }
    .validate()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    flare::server::run(config, listener, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

async fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let EngineArgs {
        database_url,
        concurrency,
        retention_days,
        lease_secs,
        shutdown_grace_secs,
    } = args.engine;
    let config = RawWorker {
        database_url,
        concurrency,
        retention_days,
        lease_secs,
        shutdown_grace_secs,
        demo: true,
        ..RawWorker::default()
    }
    .validate()?;
    let jobs = if args.bench_job {
        vec![flare::bench::noop_job()]
    } else {
        Vec::new()
    };
    flare::server::run_worker(config, jobs, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

async fn send(args: SendArgs) -> anyhow::Result<ExitCode> {
    let key = std::env::var("FLARE_API_KEY").ok();
    let request = flare::remote::SendRequest {
        name: args.name,
        payload: args.payload,
        delay: args.delay,
    };
    let answer = flare::remote::send(&args.url, key.as_deref(), &request).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
