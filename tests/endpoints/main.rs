//! HTTP job endpoints, end to end on every backend: a test application (an axum server in the
//! test) serves jobs at a URL; Flare indexes it, runs its jobs with signed requests and records
//! what the answers say. Covers the protocol's rules (docs/endpoints.md): output, error and
//! retry, logs, chained events sent once, every bad answer as a clear attempt error, bad
//! indexes refused whole, re-index and removal cancelling queued runs, conflicts, and the jobs
//! no live node serves.
//!
//! `fixture` holds the test application and the registry over a client; the other modules are
//! the tests, by what they are about: `runs` (the `run` action's answers), `index` (the `index`
//! action: bad, changed, conflicting), `nodes` (which node serves what), `api` (the JSON API), `steps`, `waits`, `invoke` and `callbacks` (protocol version 2's durable
//! steps).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod api;
mod callbacks;
mod fixture;
mod index;
mod invoke;
mod nodes;
mod owners;
mod runs;
mod steps;
mod waits;
