//! The engine's behaviour suite: what happens to events and runs through `flare::Client`, every
//! test on each backend (`backend_tests!`), time moved by a manual clock.
//!
//! One module per noun: `events` (sends, broadcast, filters, ids, delays), `runs` (outputs,
//! chaining, leases, concurrency, retention), `failures` (retries, attempts, panics, timeouts),
//! `shutdown`, `steps` (durable steps and waits), `schedules` (cron and interval jobs), `control`
//! (cancel, pause, bulk actions), `leader` (several nodes: one runs maintenance, another takes
//! over), `nodes` (named nodes, a paused start), `cancel_on` (runs cancelled by an event),
//! `onboarding` (issue 27's workflow of `examples/onboarding`, restarted in each wait).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod callbacks;
mod cancel_on;
mod control;
mod events;
mod failure_events;
mod failures;
mod fan_out;
mod invoke;
mod leader;
mod nodes;
mod onboarding;
mod runs;
mod schedules;
mod shutdown;
mod steps;
mod waits;
