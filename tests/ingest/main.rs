//! The ingest side of the HTTP face, driven through `flare::http::app` without a socket:
//! `/trigger`, the signed webhooks, access control and the compatible ingest routes.

mod auth;
mod compat;
mod support;
mod trigger;
mod webhooks;
