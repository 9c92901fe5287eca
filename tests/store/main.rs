//! The store's behaviour suite: what `flare::store::Store` keeps true, every test on each backend
//! (`backend_tests!`), with the PostgreSQL-only checks beside them.
//!
//! One module per noun: `backup` (online SQLite backups), `nodes` (several nodes racing on one database), `upgrades` (databases
//! migrated while they hold work), `search` (the payload search and the event counts),
//! `webhooks` (verified webhook deliveries), `sources` (webhook sources and their refusals),
//! `ended` (runs cancelled without an attempt send `flare/run.cancelled`), `fan_in` (a parent's
//! last child ending makes it due and wakes the workers), `wait_locks`
//! (PostgreSQL: an insert takes its names' locks before it writes), `wait_index` (PostgreSQL:
//! events look their waiters, and the runs they cancel, up by the hash index of their keys);
//! `fixture` holds what they build on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod backup;
mod debounce;
mod ended;
mod expiry;
mod fan_in;
mod fixture;
mod flow;
mod nodes;
mod priority;
mod rate;
mod search;
mod sources;
mod throttle;
mod upgrades;
mod wait_index;
mod wait_locks;
mod webhooks;
