//! The ingest side of the HTTP face, driven through `flare::http::app` without a socket:
//! `/trigger`, the signed webhooks, access control, the compatible ingest routes and the browser
//! guards (loopback names without a key, no cross-site state changes).

#[path = "../support/mod.rs"]
mod support;

mod app;
mod auth;
mod compat;
mod guard;
mod shapes;
mod sources;
mod trigger;
mod trigger_fuzz;
mod webhooks;
