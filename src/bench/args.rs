//! What a benchmark run is given ([`Args`], [`Scenario`]) and gives back ([`Sample`], [`Error`]),
//! shared by every scenario.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
    /// A fan-out / fan-in of `--children` runs through `io.invoke_all`, beside the plain drain
    /// of as many queued runs, on SQLite and (with `--database-url`) PostgreSQL (not part of
    /// `all`).
    FanIn,
    /// The send rate with `--waiters` runs waiting in `io.wait_for_event` on keys of their own,
    /// for events matching none and events each matching one, beside the rates without waiters
    /// (events starting nothing, and events each starting one run), on SQLite and (with
    /// `--database-url`) PostgreSQL (not part of `all`).
    Waiters,
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
    /// Drain: give the no-op job a concurrency limit of 1 per key over this many keys (event
    /// `i` has the key `i % keys`); 0: no limit.
    #[arg(long, default_value_t = 0)]
    pub keys: usize,
    /// Drain: also queue this many runs of a second job whose one key is at its limit of 1 (its
    /// running run never ends while the drain lasts), so the claim has a held backlog to pass
    /// over (head-of-line blocking); 0: none.
    #[arg(long, default_value_t = 0)]
    pub held: usize,
    /// Concurrent senders in the end-to-end and waiters scenarios.
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
    /// fan-in: the children one parent invokes at once.
    #[arg(long, default_value_t = 10_000)]
    pub children: usize,
    /// waiters: the runs waiting for an event while events are sent (`--events` of each kind,
    /// at most this many).
    #[arg(long, default_value_t = 100_000)]
    pub waiters: usize,
    /// waiters: the key of run and event `i` is a 16-hex-digit string scrambled from `i` (as
    /// order or user ids are), not the number `i`: each lookup lands at its own place in the
    /// index, where consecutive numbers land beside the previous one.
    #[arg(long)]
    pub scattered_keys: bool,
    /// One JSON line per scenario variant on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One repetition's figures, by metric name.
pub type Sample = BTreeMap<&'static str, f64>;

pub(super) fn db_url(dir: &std::path::Path) -> String {
    format!("sqlite://{}/flare.db", dir.display())
}
