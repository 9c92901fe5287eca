//! # Flare
//!
//! A self-hosted event and background-job platform: an application sends named events with JSON
//! payloads; jobs that listen for a name run in the background, reliably. One binary, embedded
//! SQLite by default.
//!
//! ```no_run
//! use flare::{event_trigger, Client, Delay, Io, Job, SendEvent};
//! # async fn demo() -> Result<(), flare::Error> {
//! let client = Client::connect("sqlite://flare.db").await?;
//! client.define_job(
//!     Job::new("send-welcome-email", "Send welcome email", "1.0.0")
//!         .trigger(event_trigger("user.created"))
//!         .run(|payload: serde_json::Value, io: Io| async move {
//!             io.logger.info(format!("welcome {}", payload["email"]));
//!             Ok(serde_json::json!({ "sent": true }))
//!         }),
//! )?;
//! client.send_event("user.created", &serde_json::json!({"email": "ada@example.com", "userId": "u1"})).await?;
//! client.send_event_with(SendEvent::new("reminder.send", &serde_json::json!({})).delay(Delay::hours(24))).await?;
//! # Ok(()) }
//! ```
//!
//! To run jobs as the whole service (HTTP API, dashboard, workers) from an application's own
//! binary, build its `main` on [`App`]: `flare::App::new("my-app").job(job).run()`.
//!
//! ## Layout
//! Layers, bottom up; a module imports only from its own layer or below (ARCHITECTURE.md,
//! "Layers"; kept by `tests/architecture.rs`).
//! - **Nouns**: [`model`] (events, delays, runs, steps, the stored job definition, retry policy,
//!   job errors), [`clock`], [`schedule`] (cron and intervals), [`filter`] (payload filters),
//!   [`strict_json`] (an object wherever a struct is expected), [`metrics`] (Prometheus
//!   counters), [`log_throttle`] (summarised log lines).
//! - **Store**: [`store`], the only module that speaks SQL: its contract in `store/mod.rs`, the
//!   SQLite and PostgreSQL backends mirrored file for file.
//! - **Engine**: [`engine`]: worker, executor, durable steps, completer, heartbeat, maintenance.
//! - **Rust API**: [`send`] (sending an event), [`client`] ([`Client`]), [`io`] ([`Io`], what a
//!   running job gets), [`job`] ([`Job`], [`event_trigger`] and the schedule triggers).
//! - **Endpoints and webhooks**: [`endpoints`] (jobs in any language behind an HTTP endpoint),
//!   [`webhooks`] (signature verifiers, payload mapping).
//! - **HTTP**: [`http`]: `/trigger`, webhooks, compatible ingest (Trigger.dev, Inngest), the
//!   JSON API, the dashboard (`http::dashboard`), access control, health.
//! - **App**: [`config`] (flags → validated settings), [`server`] (`run_with`, `run_worker`),
//!   [`app`] ([`App`], the command line), [`remote`] (`flare send`), [`reference_jobs`] (the
//!   demo jobs), [`bench`](mod@bench) (`flare bench`).

pub mod app;
pub mod bench;
pub mod client;
pub mod clock;
pub mod config;
pub mod endpoints;
pub mod engine;
pub mod filter;
pub mod http;
pub mod io;
pub mod job;
pub mod log_throttle;
pub mod metrics;
pub mod model;
pub mod reference_jobs;
pub mod remote;
pub mod schedule;
pub mod send;
pub mod server;
pub mod store;
pub mod strict_json;
pub mod webhooks;

/// The README's Rust snippets, compiled by `cargo test --doc` so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use app::App;
pub use client::{
    send_event, send_event_with, Client, ClientBuilder, Conflict, Error, SendEvent, Sent,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Engine, EngineConfig};
pub use filter::Filter;
pub use io::{Callback, Io, Logger, WaitFor};
pub use job::{cron_trigger, event_trigger, interval_trigger, schedule_trigger, Job, Trigger};
pub use model::CancelOn;
pub use model::ConcurrencyLimit;
pub use model::Debounce;
pub use model::RetryPolicy;
pub use model::{
    Delay, Level, Run, RunStatus, Step, StepKind, StepStatus, StoredEvent, WaitedEvent,
};
pub use model::{Event, JobError};
pub use schedule::Schedule;
pub use store::ended::RunFailure;
