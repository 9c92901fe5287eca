//! The command line's flags and variables (clap): the subcommands and the arguments each takes.
//! What they mean is `super`'s (`crate::app`); this file only declares them.

use clap::{Parser, Subcommand};

/// The variables `serve` reads besides those named with its options (`[env: …]`).
pub(crate) const SERVE_ENV: &str = "\
Environment (besides the [env: …] of the options above):
  FLARE_API_KEY           the API key: when set, everything but the webhooks and health needs it
                          (Bearer, or the dashboard's login); unset: loopback clients only
  FLARE_METRICS_TOKEN     a Bearer token that reads GET /metrics and nothing else (for a scraper)
  STRIPE_WEBHOOK_SECRET   Stripe signing secret(s) for /webhooks/payments, comma-separated to rotate
  CLERK_WEBHOOK_SECRET    Clerk (Svix) secret(s), whsec_…, for /webhooks/auth, comma-separated
  FLARE_ENDPOINTS         HTTP job endpoints given at start, comma-separated (as --endpoint)
  FLARE_ENDPOINT_SECRET   their Standard Webhooks secret (whsec_<base64>), required with endpoints
  FLARE_ENDPOINT_ALLOW    as --endpoint-allow, comma-separated
  FLARE_PG_LISTEN=off     PostgreSQL: poll only, no LISTEN connection (transaction-mode poolers)
  RUST_LOG                log filter, default info (e.g. RUST_LOG=flare=debug)
  NO_COLOR                no colours in the log, even on a terminal";

/// The variables `worker` reads besides those named with its options.
pub(crate) const WORKER_ENV: &str = "\
Environment (besides the [env: …] of the options above):
  FLARE_ENDPOINTS         HTTP job endpoints given at start, comma-separated (as --endpoint)
  FLARE_ENDPOINT_SECRET   their Standard Webhooks secret (whsec_<base64>), required with endpoints
  FLARE_ENDPOINT_ALLOW    as --endpoint-allow, comma-separated
  FLARE_PG_LISTEN=off     PostgreSQL: poll only, no LISTEN connection (transaction-mode poolers)
  RUST_LOG                log filter, default info (e.g. RUST_LOG=flare=debug)
  NO_COLOR                no colours in the log, even on a terminal";

#[derive(Parser)]
#[command(
    name = "flare",
    version,
    about = "Events, background jobs, webhooks and a dashboard in one binary",
    after_help = "Each command's --help names the environment variables it reads."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the service: HTTP API, dashboard, scheduler and workers running the jobs.
    #[command(after_help = SERVE_ENV)]
    Serve(ServeArgs),
    /// Run jobs without the HTTP server: workers, scheduler, rescuer and pruner on a shared
    /// database (scale-out: start as many as you need next to one `serve`).
    #[command(after_help = WORKER_ENV)]
    Worker(WorkerArgs),
    /// Write a consistent copy of a running SQLite database to a new file (online: VACUUM INTO;
    /// PostgreSQL: use pg_dump). Open a copy with `serve --paused` so it fires nothing.
    Backup(BackupArgs),
    /// Measure send throughput, end-to-end throughput, latency and memory on temp databases.
    Bench(crate::bench::Args),
    /// Send an event through a running server (POST /trigger; FLARE_API_KEY as Bearer key).
    #[command(
        after_help = "Exit status: 0 sent, or the id was sent before with the same name and payload \
                      (a duplicate: nothing new started); 3 the id was sent before with another name \
                      or payload (a conflict: nothing stored, the stored event is printed); \
                      1 any other error; 2 a usage error."
    )]
    Send(SendArgs),
    /// Test a webhook source without its provider: `send` signs a body as the provider would
    /// and delivers it; `fixtures` writes the bundled bodies.
    Webhook(crate::remote::webhook::Args),
}

#[derive(clap::Args)]
pub(crate) struct SendArgs {
    /// Event name, e.g. user.created.
    pub(crate) name: String,
    /// Payload as JSON.
    #[arg(long)]
    pub(crate) payload: Option<String>,
    /// Event id, for idempotency: the same id never starts anything twice (the answer then says
    /// "duplicate", and "conflict" when the name or payload differ from the stored event's).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Deliver later, e.g. 90s, 15m, 2h, 1d, 1h30m.
    #[arg(long, conflicts_with = "deliver_at")]
    pub(crate) delay: Option<String>,
    /// Deliver at this time, RFC 3339, e.g. 2030-01-01T09:00:00Z.
    #[arg(long)]
    pub(crate) deliver_at: Option<String>,
    /// Context as JSON, stored with the event (shown with it, not passed to jobs).
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// The server.
    #[arg(long, env = "FLARE_URL", default_value = "http://127.0.0.1:3000")]
    pub(crate) url: String,
}

#[derive(clap::Args)]
pub(crate) struct BackupArgs {
    /// The new file to write (never overwritten).
    pub(crate) path: std::path::PathBuf,
    /// The database to back up (sqlite://PATH).
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://flare.db")]
    pub(crate) database_url: String,
}

/// The engine's settings, the same for `serve` and `worker`.
#[derive(clap::Args)]
pub(crate) struct EngineArgs {
    /// Database URL (sqlite://PATH or postgres://…), shared by every node of a deployment.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://flare.db")]
    pub(crate) database_url: String,
    /// Runs executing at once in this process.
    #[arg(long, env = "FLARE_CONCURRENCY", default_value_t = 100)]
    pub(crate) concurrency: usize,
    /// Delete finished events older than this many days (0 keeps everything).
    #[arg(long, env = "FLARE_RETENTION_DAYS", default_value_t = 7)]
    pub(crate) retention_days: u64,
    /// Lease of a claimed run, in seconds: a run whose process died is retried after this.
    #[arg(long, env = "FLARE_LEASE_SECS", default_value_t = 30)]
    pub(crate) lease_secs: u64,
    /// Seconds running jobs get to finish on SIGTERM/SIGINT.
    #[arg(long, env = "FLARE_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub(crate) shutdown_grace_secs: u64,
    /// This process's name on the workers page, in run records and logs (letters, digits, . _ -
    /// :), unique among the live processes of a database. Default: host name and process id.
    #[arg(long, env = "FLARE_NODE_NAME", value_name = "NAME")]
    pub(crate) node_name: Option<String>,
    /// Pause every job at start, before any run is claimed (stored: resume each on the jobs
    /// page or with POST /api/jobs/{id}/resume). For opening a copy of a database without firing
    /// its schedules and endpoint calls.
    #[arg(long)]
    pub(crate) paused: bool,
}

/// Which jobs a node runs besides the application's, the same for `serve` and `worker`.
#[derive(clap::Args)]
pub(crate) struct JobArgs {
    /// Also define the seed's demo jobs (the help of each binary says its default).
    #[arg(
        long,
        env = "FLARE_DEMO",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub(crate) demo: Option<bool>,
    /// An HTTP job endpoint (repeatable; or FLARE_ENDPOINTS, comma-separated), signed with the
    /// secret in FLARE_ENDPOINT_SECRET (docs/endpoints.md).
    #[arg(long = "endpoint", value_name = "URL")]
    pub(crate) endpoints: Vec<String>,
    /// Also let endpoints be at this link-local, cloud metadata or unspecified address, network
    /// or host name, refused otherwise (repeatable; or FLARE_ENDPOINT_ALLOW, comma-separated).
    #[arg(long = "endpoint-allow", value_name = "CIDR|HOST")]
    pub(crate) endpoint_allow: Vec<String>,
}

impl JobArgs {
    /// `--endpoint` URLs, or else those of `FLARE_ENDPOINTS`.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        if !self.endpoints.is_empty() {
            return self.endpoints.clone();
        }
        std::env::var("FLARE_ENDPOINTS")
            .map(|list| split_list(&list))
            .unwrap_or_default()
    }

    /// `--endpoint-allow` entries, or else those of `FLARE_ENDPOINT_ALLOW`.
    pub(crate) fn endpoint_allow(&self) -> Vec<String> {
        if !self.endpoint_allow.is_empty() {
            return self.endpoint_allow.clone();
        }
        std::env::var("FLARE_ENDPOINT_ALLOW")
            .map(|list| split_list(&list))
            .unwrap_or_default()
    }
}

/// A comma-separated list, trimmed, without empty entries.
pub(crate) fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[derive(clap::Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    #[command(flatten)]
    pub(crate) jobs: JobArgs,
    /// Also run the no-op job of `flare bench` (for the multi-process benchmark).
    #[arg(long, hide = true)]
    pub(crate) bench_job: bool,
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "FLARE_LISTEN", default_value = "127.0.0.1:3000")]
    pub(crate) listen: String,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    #[command(flatten)]
    pub(crate) jobs: JobArgs,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "FLARE_MAX_BODY_BYTES", default_value_t = crate::http::body::DEFAULT_BODY_LIMIT)]
    pub(crate) max_body_bytes: usize,
    /// HTTP connections open at once; more clients wait until one ends.
    #[arg(long, env = "FLARE_MAX_CONNECTIONS", default_value_t = crate::http::connections::DEFAULT_MAX_CONNECTIONS)]
    pub(crate) max_connections: usize,
    /// HTTP connections one client (IP address, IPv6 by /64) may hold; its next one replaces its
    /// oldest idle one. Default: a quarter of --max-connections (behind a reverse proxy every
    /// connection comes from the proxy: raise it up to --max-connections).
    #[arg(long, env = "FLARE_MAX_CONNECTIONS_PER_IP")]
    pub(crate) max_connections_per_ip: Option<usize>,
    /// Seconds a new connection gets to send the first byte of its request.
    #[arg(long, env = "FLARE_FIRST_BYTE_TIMEOUT_SECS", default_value_t = crate::http::connections::DEFAULT_FIRST_BYTE_TIMEOUT_SECS)]
    pub(crate) first_byte_timeout_secs: u64,
    /// Seconds a client gets to send a request's headers (also how long a kept-alive connection
    /// may stay idle).
    #[arg(long, env = "FLARE_HEADER_TIMEOUT_SECS", default_value_t = crate::http::connections::DEFAULT_HEADER_TIMEOUT_SECS)]
    pub(crate) header_timeout_secs: u64,
    /// Seconds a client gets to send a request's body.
    #[arg(long, env = "FLARE_BODY_TIMEOUT_SECS", default_value_t = crate::http::connections::DEFAULT_BODY_TIMEOUT_SECS)]
    pub(crate) body_timeout_secs: u64,
    /// A reverse proxy (address or CIDR range; repeatable, or comma-separated in the variable)
    /// whose X-Forwarded-For names the client that the wrong-key throttle counts; by default the
    /// peer address is the client and X-Forwarded-For is ignored.
    #[arg(
        long = "trusted-proxy",
        env = "FLARE_TRUSTED_PROXIES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub(crate) trusted_proxies: Vec<String>,
    /// A JSON file of webhook sources (`[{"id": "github", "preset": "github", "secretEnv":
    /// "GITHUB_WEBHOOK_SECRET"}, …]`), read at start; each answers at /webhooks/{id}.
    #[arg(long, env = "FLARE_WEBHOOK_SOURCES", value_name = "FILE")]
    pub(crate) webhook_sources: Option<String>,
}
