//! [`App`]: the whole service inside an application's own binary, and the command line of `flare`.
//!
//! An application with jobs in Rust builds its binary on Flare:
//!
//! ```no_run
//! use flare::{event_trigger, Io, Job};
//!
//! fn main() -> std::process::ExitCode {
//!     flare::App::new("my-app")
//!         .job(
//!             Job::new("charge-order", "Charge the order", "1.0.0")
//!                 .trigger(event_trigger("order.placed"))
//!                 .run(|order: serde_json::Value, io: Io| async move {
//!                     io.logger.info(format!("charging {}", order["orderId"]));
//!                     Ok(serde_json::json!({ "charged": true }))
//!                 }),
//!         )
//!         .run()
//! }
//! ```
//!
//! `my-app serve`, `my-app worker`, `my-app send` and `my-app bench` then take the same flags and
//! variables as `flare`'s (`my-app --help`), and the service runs the application's jobs. The
//! seed's demo jobs ([`crate::reference_jobs`]) run only when asked for: `.demo(true)` in the
//! application, `--demo` / `FLARE_DEMO=true` by the operator. The `flare` binary is
//! [`App::flare`], whose `serve` runs them unless endpoints are given at start.
//!
//! The command line lives here, so this is the one module that uses `anyhow` (STYLE.md: anyhow
//! is for the CLI): every error ends in [`App::run`], which prints it and its causes on one line.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};

use crate::config::{RawServe, RawWorker};

mod args;
use crate::job::Job;
use args::{BackupArgs, Cli, Command, EngineArgs, SendArgs, ServeArgs, WorkerArgs};

/// A binary built on Flare: its jobs and the `serve`, `worker`, `send` and `bench` commands.
pub struct App {
    name: String,
    jobs: Vec<Job>,
    demo: DemoDefault,
    flare: bool,
}

/// Whether the demo jobs run when neither `--demo` nor `FLARE_DEMO` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DemoDefault {
    Off,
    On,
    /// `flare` itself: `serve` runs them unless endpoints are given at start; `worker` never.
    ServeWithoutEndpoints,
}

impl App {
    /// An application called `name` (the program name in `--help` and in error messages), with
    /// no jobs yet and without the demo jobs.
    pub fn new(name: impl Into<String>) -> Self {
        App {
            name: name.into(),
            jobs: Vec::new(),
            demo: DemoDefault::Off,
            flare: false,
        }
    }

    /// The `flare` command: no jobs of its own; `flare serve` runs the seed's demo jobs unless
    /// `--demo=false` or endpoints are given at start (`--endpoint`/`FLARE_ENDPOINTS`), `flare
    /// worker` only with `--demo`.
    pub fn flare() -> Self {
        App {
            demo: DemoDefault::ServeWithoutEndpoints,
            flare: true,
            ..App::new("flare")
        }
    }

    /// Adds a job that `serve` and `worker` define (and store) before they start.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// Adds several jobs.
    pub fn jobs(mut self, jobs: impl IntoIterator<Item = Job>) -> Self {
        self.jobs.extend(jobs);
        self
    }

    /// Whether `serve` and `worker` also define the seed's demo jobs when the operator does not
    /// say (`--demo[=true|false]`, `FLARE_DEMO`). Off unless set.
    pub fn demo(mut self, on: bool) -> Self {
        self.demo = if on {
            DemoDefault::On
        } else {
            DemoDefault::Off
        };
        self
    }

    /// Parses the process's arguments and runs the command; returns the exit code for `main`.
    /// Call it from a plain `fn main`, not inside an async runtime: it starts its own.
    pub fn run(self) -> ExitCode {
        self.run_from(std::env::args_os())
    }

    /// Like [`App::run`] with `args` as the command line (the first one is the program).
    /// `--help`, `--version` and usage errors print and return their exit code instead of
    /// exiting the process.
    pub fn run_from<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = match self.parse(args) {
            Ok(cli) => cli,
            Err(err) => {
                let _ = err.print();
                return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(1));
            }
        };
        init_tracing();
        let name = self.name.clone();
        match self.dispatch(cli) {
            Ok(code) => code,
            Err(err) => {
                eprintln!("{name}: {}", one_line(&err));
                ExitCode::FAILURE
            }
        }
    }

    /// The command line of this binary: `flare`'s, under this name, with the `--demo` default
    /// it has here.
    fn command(&self) -> clap::Command {
        let mut command = Cli::command()
            .name(self.name.clone())
            .bin_name(self.name.clone());
        if !self.flare {
            command = command
                .about(format!(
                    "{}: its jobs on Flare's service (events, background jobs, webhooks and a dashboard)",
                    self.name
                ))
                .version(concat!("(flare ", env!("CARGO_PKG_VERSION"), ")"));
        }
        let (serve_default, worker_default) = match self.demo {
            DemoDefault::Off => ("off", "off"),
            DemoDefault::On => ("on", "on"),
            DemoDefault::ServeWithoutEndpoints => {
                ("on unless --endpoint/FLARE_ENDPOINTS is given", "off")
            }
        };
        for (subcommand, default) in [("serve", serve_default), ("worker", worker_default)] {
            command = command.mut_subcommand(subcommand, |c| {
                c.mut_arg("demo", |a| {
                    a.help(format!(
                        "Also define the demo jobs (on user.created, file.uploaded, …), \
                         not for a deployment. Default: {default}"
                    ))
                })
            });
        }
        command
    }

    fn parse<I, T>(&self, args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut command = self.command();
        let matches = command.try_get_matches_from_mut(args)?;
        Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
    }

    /// Whether the demo jobs run for `kind`, given `--demo`/`FLARE_DEMO` and the endpoints.
    fn demo_for(&self, kind: NodeKind, flag: Option<bool>, endpoints_given: bool) -> bool {
        flag.unwrap_or(match (self.demo, kind) {
            (DemoDefault::Off, _) => false,
            (DemoDefault::On, _) => true,
            (DemoDefault::ServeWithoutEndpoints, NodeKind::Serve) => !endpoints_given,
            (DemoDefault::ServeWithoutEndpoints, NodeKind::Worker) => false,
        })
    }

    fn dispatch(self, cli: Cli) -> anyhow::Result<ExitCode> {
        if tokio::runtime::Handle::try_current().is_ok() {
            anyhow::bail!(
                "App::run must be called outside an async runtime: from a plain `fn main`, not `#[tokio::main]`"
            );
        }
        let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        let result = runtime.block_on(async move {
            match cli.command {
                Command::Serve(args) => self.serve(args).await,
                Command::Worker(args) => self.worker(args).await,
                Command::Send(args) => send(self.name, args).await,
                Command::Backup(args) => backup(args).await,
                Command::Webhook(args) => crate::remote::webhook::run(args).await,
                Command::Bench(args) => crate::bench::run(args)
                    .await
                    .map(|_| ExitCode::SUCCESS)
                    .context("benchmark failed"),
            }
        });
        // A storage call still blocked (a damaged database) must not keep the process alive.
        runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        result
    }

    async fn serve(self, args: ServeArgs) -> anyhow::Result<ExitCode> {
        let endpoints = args.jobs.endpoints();
        let demo = self.demo_for(NodeKind::Serve, args.jobs.demo, !endpoints.is_empty());
        let config = RawServe {
            listen: args.listen,
            database_url: args.engine.database_url,
            api_key: std::env::var("FLARE_API_KEY").ok(),
            metrics_token: std::env::var("FLARE_METRICS_TOKEN").ok(),
            stripe_secrets: std::env::var("STRIPE_WEBHOOK_SECRET").ok(),
            clerk_secrets: std::env::var("CLERK_WEBHOOK_SECRET").ok(),
            concurrency: args.engine.concurrency,
            retention_days: args.engine.retention_days,
            lease_secs: args.engine.lease_secs,
            shutdown_grace_secs: args.engine.shutdown_grace_secs,
            max_body_bytes: Some(args.max_body_bytes),
            max_connections: Some(args.max_connections),
            max_connections_per_ip: args.max_connections_per_ip,
            first_byte_timeout_secs: Some(args.first_byte_timeout_secs),
            header_timeout_secs: Some(args.header_timeout_secs),
            body_timeout_secs: Some(args.body_timeout_secs),
            demo,
            endpoints,
            endpoint_secret: std::env::var("FLARE_ENDPOINT_SECRET").ok(),
            trusted_proxies: args.trusted_proxies,
            endpoint_allow: args.jobs.endpoint_allow(),
            webhook_sources: args.webhook_sources,
            node_name: args.engine.node_name,
            paused: args.engine.paused,
        }
        .validate()?;
        let listener = crate::http::connections::listen(config.listen)
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        crate::server::run_with(config, self.jobs, listener, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    }

    async fn worker(self, args: WorkerArgs) -> anyhow::Result<ExitCode> {
        let endpoints = args.jobs.endpoints();
        let demo = self.demo_for(NodeKind::Worker, args.jobs.demo, !endpoints.is_empty());
        let EngineArgs {
            database_url,
            concurrency,
            retention_days,
            lease_secs,
            shutdown_grace_secs,
            node_name,
            paused,
        } = args.engine;
        let config = RawWorker {
            database_url,
            concurrency,
            retention_days,
            lease_secs,
            shutdown_grace_secs,
            demo,
            endpoints,
            endpoint_secret: std::env::var("FLARE_ENDPOINT_SECRET").ok(),
            endpoint_allow: args.jobs.endpoint_allow(),
            node_name,
            paused,
        }
        .validate()?;
        let mut jobs = self.jobs;
        if args.bench_job {
            jobs.push(crate::bench::noop_job());
        }
        crate::server::run_worker(config, jobs, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    }
}

#[derive(Debug, Clone, Copy)]
enum NodeKind {
    Serve,
    Worker,
}

/// Logs to stderr (`RUST_LOG`, default `info`), unless the application set up tracing itself.
/// Colours only on a terminal and without `NO_COLOR`, so a log file or collector gets plain text.
fn init_tracing() {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    use std::io::IsTerminal;
    let ansi = colours(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,flare=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

/// Whether log lines carry ANSI colours: only on a terminal, and not when `NO_COLOR` is set to
/// anything but the empty string (<https://no-color.org>).
fn colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
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

/// `send`'s exit status when the id was already stored with another name or payload (a
/// conflict): the event sent was not stored, and a script can tell (0 is a send or an identical
/// duplicate, 1 an error, 2 a usage error).
pub const SEND_CONFLICT_EXIT: u8 = 3;

async fn send(program: String, args: SendArgs) -> anyhow::Result<ExitCode> {
    let key = std::env::var("FLARE_API_KEY").ok();
    let request = crate::remote::SendRequest {
        name: args.name,
        payload: args.payload,
        id: args.id,
        delay: args.delay,
        deliver_at: args.deliver_at,
        context: args.context,
        program,
    };
    let answer = crate::remote::send(&args.url, key.as_deref(), &request).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if answer["conflict"] == serde_json::Value::Bool(true) {
        if let Some(message) = answer["message"].as_str() {
            eprintln!("warning: {message}");
        }
        return Ok(ExitCode::from(SEND_CONFLICT_EXIT));
    }
    Ok(ExitCode::SUCCESS)
}

async fn backup(args: BackupArgs) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    crate::store::Store::backup(&args.database_url, &args.path)
        .await
        .with_context(|| {
            format!(
                "cannot back up {}",
                crate::store::postgres::redact(&args.database_url)
            )
        })?;
    let bytes = std::fs::metadata(&args.path).map(|m| m.len()).unwrap_or(0);
    println!(
        "backed up {} to {} ({bytes} bytes, {} ms); open a copy with `serve --paused` so it runs nothing",
        args.database_url,
        args.path.display(),
        started.elapsed().as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGTERM or Ctrl-C. The handlers are installed when this is called, not when it
/// is first polled: a signal sent as soon as "flare is listening" is logged (a supervisor, a
/// test) must stop the process cleanly, not kill it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::event_trigger;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colours(true, None));
        assert!(!colours(false, None), "a pipe or file gets plain text");
        assert!(!colours(true, Some(OsStr::new("1"))));
        assert!(colours(true, Some(OsStr::new(""))), "NO_COLOR= is unset");
    }

    fn job(id: &str) -> Job {
        Job::new(id, "A job", "1.0.0")
            .trigger(event_trigger("thing.happened"))
            .run(
                |_: serde_json::Value, _io: crate::io::Io| async move { Ok(serde_json::json!({})) },
            )
    }

    /// Whether `args` (after the program name) would run the demo jobs.
    fn demo(app: &App, args: &[&str], endpoints_given: bool) -> bool {
        let cli = app
            .parse(std::iter::once("prog").chain(args.iter().copied()))
            .expect("parses");
        match cli.command {
            Command::Serve(a) => app.demo_for(NodeKind::Serve, a.jobs.demo, endpoints_given),
            Command::Worker(a) => app.demo_for(NodeKind::Worker, a.jobs.demo, endpoints_given),
            _ => panic!("not serve or worker"),
        }
    }

    #[test]
    fn flare_serve_runs_the_demo_unless_told_or_given_endpoints() {
        if std::env::var_os("FLARE_DEMO").is_some() {
            return; // the variable would decide
        }
        let flare = App::flare();
        assert!(demo(&flare, &["serve"], false));
        assert!(
            !demo(&flare, &["serve"], true),
            "endpoints turn the demo off"
        );
        assert!(!demo(&flare, &["serve", "--demo=false"], false));
        assert!(demo(&flare, &["serve", "--demo"], true));
        assert!(!demo(&flare, &["worker"], false));
        assert!(demo(&flare, &["worker", "--demo"], false));
        assert!(demo(&flare, &["worker", "--demo=true"], false));
    }

    #[test]
    fn an_app_runs_the_demo_only_when_asked() {
        if std::env::var_os("FLARE_DEMO").is_some() {
            return;
        }
        let app = App::new("my-app").job(job("a"));
        assert!(!demo(&app, &["serve"], false));
        assert!(!demo(&app, &["worker"], false));
        assert!(demo(&app, &["serve", "--demo"], false));
        let app = App::new("my-app").demo(true);
        assert!(demo(&app, &["serve"], true));
        assert!(demo(&app, &["worker"], false));
        assert!(!demo(&app, &["worker", "--demo=false"], false));
    }

    #[test]
    fn the_command_line_carries_the_app_name_and_returns_exit_codes() {
        let app = App::new("my-app");
        let help = app.command().render_help().to_string();
        assert!(help.contains("Usage: my-app <COMMAND>"), "{help}");
        let mut serve = app
            .command()
            .find_subcommand("serve")
            .expect("serve")
            .clone();
        let serve_help = serve.render_long_help().to_string();
        assert!(serve_help.contains("--demo") && serve_help.contains("Default: off"));
        assert!(serve_help.contains("--endpoint <URL>"), "{serve_help}");
        assert!(
            serve_help.contains("--trusted-proxy <CIDR>")
                && serve_help.contains("FLARE_TRUSTED_PROXIES"),
            "{serve_help}"
        );
        assert_eq!(
            App::new("my-app").run_from(["my-app", "--version"]),
            ExitCode::SUCCESS
        );
        assert_eq!(
            App::new("my-app").run_from(["my-app", "serve", "--no-such-flag"]),
            ExitCode::from(2)
        );
        assert!(App::new("my-app")
            .parse(["my-app", "serve", "--demo=maybe"])
            .is_err());
    }

    #[test]
    fn help_names_every_environment_variable_that_matters() {
        let app = App::flare();
        let help = |name: &str| {
            app.command()
                .find_subcommand(name)
                .expect("subcommand")
                .clone()
                .render_long_help()
                .to_string()
        };
        let serve = help("serve");
        for var in [
            "FLARE_API_KEY",
            "FLARE_METRICS_TOKEN",
            "STRIPE_WEBHOOK_SECRET",
            "CLERK_WEBHOOK_SECRET",
            "FLARE_ENDPOINTS",
            "FLARE_ENDPOINT_SECRET",
            "FLARE_ENDPOINT_ALLOW",
            "FLARE_PG_LISTEN",
            "RUST_LOG",
            "NO_COLOR",
            "DATABASE_URL",
            "FLARE_LISTEN",
            "FLARE_CONCURRENCY",
            "FLARE_DEMO",
            "FLARE_WEBHOOK_SOURCES",
            "FLARE_TRUSTED_PROXIES",
        ] {
            assert!(serve.contains(var), "serve --help names {var}:\n{serve}");
        }
        let worker = help("worker");
        for var in [
            "DATABASE_URL",
            "FLARE_ENDPOINTS",
            "FLARE_ENDPOINT_SECRET",
            "RUST_LOG",
            "FLARE_PG_LISTEN",
        ] {
            assert!(worker.contains(var), "worker --help names {var}:\n{worker}");
        }
        let send = help("send");
        assert!(
            send.contains("FLARE_URL") && send.contains("FLARE_API_KEY"),
            "{send}"
        );
    }

    /// Runs `worker` on a fresh SQLite file and returns its error on one line.
    fn worker_error(app: App) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/x.db", dir.path().display());
        let cli = app
            .parse(["my-app", "worker", "--database-url", &url, "--demo=false"])
            .expect("parses");
        let err = app.dispatch(cli).expect_err("the jobs are refused");
        one_line(&err)
    }

    #[test]
    fn a_bad_job_stops_the_start_with_one_clear_line() {
        let line = worker_error(App::new("my-app").job(job("Bad Id")));
        assert!(
            line.starts_with("cannot define the jobs: invalid job id \"Bad Id\""),
            "{line}"
        );
        let line = worker_error(App::new("my-app").jobs([job("twice"), job("twice")]));
        assert_eq!(line, "job twice is given twice: every job needs its own id");
        let untriggered = Job::new("no-trigger", "No trigger", "1.0.0").run(
            |_: serde_json::Value, _io: crate::io::Io| async move { Ok(serde_json::json!({})) },
        );
        let line = worker_error(App::new("my-app").job(untriggered));
        assert!(line.contains("job no-trigger: no trigger"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn a_database_a_newer_flare_migrated_stops_the_start_with_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.db");
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "CREATE TABLE flare_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL); \
             INSERT INTO flare_migrations VALUES (9999, 0);",
        )
        .expect("a newer schema");
        drop(conn);
        let url = format!("sqlite://{}", path.display());
        let app = App::new("my-app");
        let cli = app
            .parse(["my-app", "worker", "--database-url", &url, "--demo=false"])
            .expect("parses");
        let line = one_line(&app.dispatch(cli).expect_err("refused"));
        let known = crate::store::sqlite::last_migration();
        assert_eq!(
            line,
            format!(
                "the database's schema is at migration 9999, newer than this binary's last migration \
                 {known}: it was upgraded by a newer Flare; run that version (upgrade all processes together)"
            )
        );
    }

    #[test]
    fn run_refuses_to_start_inside_a_runtime() {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let _inside = runtime.enter();
        let app = App::new("my-app");
        let cli = app.parse(["my-app", "worker"]).expect("parses");
        let err = app.dispatch(cli).expect_err("refused");
        assert!(
            err.to_string().contains("outside an async runtime"),
            "{err}"
        );
    }
}
