//! The dashboard through the router (no socket, no browser): every page with real events (a job
//! that logs, one that fails, a chain, a scheduled event), escaping, filters in the URL, keyset
//! pages, the login / session cookie / logout rules and the origin check on actions, and the HTTP
//! job endpoints (added, re-indexed and removed through the forms against a small in-test
//! application) with the jobs page saying where each job runs.
//! `tests/dashboard_browser.rs` drives the same pages in headless Chromium.
//!
//! `fixture` holds the events every test starts from and the requests a browser sends; the
//! other modules are the tests, by what they are about: `pages`, `login`, `actions` (the forms
//! that change things), `endpoints`, `jobs`, `debounce` (a debounced job on every page), `links`
//! (what cancelled, resumed or invoked a run).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod actions;
mod debounce;
mod endpoints;
mod fixture;
mod jobs;
mod links;
mod login;
mod pages;
mod polish;
mod sources;
mod workers;
