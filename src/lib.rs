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
//! - [`model`]: events, runs, log lines; the event-name and delay rules.
//! - [`job`]: job definitions ([`Job`], [`event_trigger`], the typed [`Event`] trait).
//! - [`filter`]: payload filters on triggers.
//! - [`client`]: the API ([`Client`], [`SendEvent`], the default client).
//! - [`io`]: what a running job gets ([`Io`], its logger, chained sends).
//! - [`endpoints`]: HTTP job endpoints: jobs in any language, served by an application at a URL.
//! - [`engine`]: worker, executor, retry policy, scheduler, rescuer, pruner.
//! - [`store`]: storage; the only module that speaks SQL.
//! - [`strict_json`]: JSON read strictly (an object wherever a struct is expected, at every
//!   depth), for request bodies and endpoint answers.
//! - [`webhooks`]: signature verifiers (Stripe, Svix/Standard Webhooks) and payload mapping.
//! - [`http`]: the HTTP application: `/trigger`, webhooks, compatible ingest (Trigger.dev,
//!   Inngest), the JSON API, the dashboard (`http::dashboard`), access control, health.
//! - [`log_throttle`]: summarised log lines (the first, then one per interval with the count) for
//!   what can repeat at request speed: rejected clients, storage failures.
//! - [`metrics`]: Prometheus counters and their text rendering for `GET /metrics`.
//! - [`reference_jobs`]: the demo jobs of the README's tour, run only when asked for (`--demo`).
//! - [`server`]: `run_with(config, jobs, listener, shutdown)` and `run_worker`, wiring it all.
//! - [`app`]: [`App`], the command line (`serve`, `worker`, `send`, `bench`) for `flare` and for
//!   an application's own binary with its jobs.
//! - [`remote`]: sending through a running server over HTTP (`flare send`).
//! - [`bench`]: `flare bench`, the throughput, latency and memory measurements.

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
pub use io::{Io, Logger};
pub use job::{cron_trigger, event_trigger, interval_trigger, schedule_trigger, Job, Trigger};
pub use model::RetryPolicy;
pub use model::{Delay, Level, Run, RunStatus, Step, StepKind, StepStatus, StoredEvent};
pub use model::{Event, JobError};
pub use schedule::Schedule;
