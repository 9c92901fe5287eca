//! The JSON API, `/metrics` and the OpenAPI document, driven through the router with real events
//! and jobs: a job that succeeds and logs, one that fails once without retries, and a chain.
//! Every test runs on each backend (`backend_tests!`).
//!
//! `fixture` holds the events every test starts from and the requests; the other modules are the
//! tests, by what they are about: `events` (lists, cursors, details), `links` (what cancelled,
//! resumed or invoked a run), `actions` (replay, retry,
//! cancel, pause, bulk), `stats` (jobs, statistics, `/metrics`, the OpenAPI document),
//! `parameters` (bad ones), `storage` (readiness and storage failures).

#[path = "../support/mod.rs"]
mod support;

mod actions;
mod events;
mod fixture;
mod links;
mod metrics;
mod parameters;
mod stats;
mod storage;
