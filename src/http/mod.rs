//! The HTTP application. [`app`] builds the router from an [`AppState`]; tests drive it with
//! `tower::ServiceExt::oneshot`, the server binds it to a listener.
//!
//! Routes are split in two: [`public_routes`] (health, readiness, and the webhook routes, which are
//! authenticated by their signatures) and [`protected_routes`] (everything else), which need the API
//! key when one is configured: [`app`] puts [`auth::require_api_key`] on that whole group, so a
//! route added to [`protected_routes`] is covered without further work.
//!
//! Two browser guards ([`guard`]) sit around that, inside [`guard::one_host`] (a request with two
//! `Host` headers gets 400): on the protected group, after the key check,
//! [`guard::same_origin`] refuses a state-changing request (POST, PUT, PATCH, DELETE) that the
//! browser says comes from another site (403), so a page cannot post a form to `/e/{key}` or
//! `/trigger`; and on the whole app, without an API key, [`guard::loopback_host`] serves only
//! loopback `Host` names (421 otherwise; the health routes stay open), so DNS rebinding cannot
//! make Flare a page's own origin. The webhook routes, public and signed, are outside the first.
//!
//! Every error answer is JSON `{"error": …}`: handlers return [`ApiError`], the extractors in
//! [`body`] answer bad bodies with it, and [`body::json_errors`] rewrites whatever else axum
//! produces (method not allowed, another extractor's plain-text rejection).
//!
//! HTTP knows the Rust API, the endpoints and the store's read side, never the command line or
//! `crate::config::ServeConfig`: what it needs of the configuration is [`HttpConfig`]. It issues no
//! SQL.

pub mod api;
pub mod auth;
pub mod body;
pub mod bulk;
pub mod callbacks;
pub mod client_ip;
pub mod compat;
pub mod connections;
pub mod dashboard;
pub mod duplicates;
pub mod endpoints;
pub mod error;
pub mod guard;
pub mod login_attempts;
pub mod observe;
pub mod openapi;
pub mod slots;
pub mod state;
pub mod trigger;
pub mod trigger_dev_v2;
pub mod webhook_sources;
pub mod webhooks;

use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde_json::json;

pub use error::ApiError;
pub use state::{AppState, HttpConfig, SharedState};

/// Builds the router.
pub fn app(state: AppState) -> Router {
    let protected = protected_routes()
        .route_layer(middleware::from_fn(guard::same_origin))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ));
    Router::new()
        .merge(public_routes())
        .merge(protected)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.config.body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::loopback_host,
        ))
        .layer(middleware::from_fn(guard::one_host))
        .layer(middleware::map_response(body::json_errors))
        .layer(middleware::map_response(error::storage_reads))
        .layer(middleware::from_fn(observe::count_requests))
        .with_state(state)
}

/// Routes open without the API key.
pub fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(webhooks::routes())
        .merge(callbacks::routes())
}

/// Routes that need the API key when one is configured.
pub fn protected_routes() -> Router<AppState> {
    Router::new()
        .merge(api::routes())
        .merge(bulk::routes())
        .merge(endpoints::routes())
        .merge(webhook_sources::routes())
        .merge(trigger::routes())
        .merge(compat::routes())
        .merge(trigger_dev_v2::routes())
        .merge(dashboard::routes())
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// Ready when storage answers a read and takes a write ([`crate::store::Store::health_write`]),
/// so a read-only, full or corrupt database is not ready. Otherwise 503 saying which failed (the
/// cause is logged as a warning, through the storage failures' throttle: a load balancer may poll
/// this every second).
async fn readyz(State(state): State<AppState>) -> Response {
    let store = state.client.store();
    let failure = match store.health_read().await {
        Err(e) => Some((e, "not ready: storage does not answer reads")),
        Ok(()) => store
            .health_write(state.client.clock().now_ms())
            .await
            .err()
            .map(|e| (e, "not ready: storage answers reads but refuses writes (read-only, full or damaged database?)")),
    };
    match failure {
        None => Json(json!({"status": "ready"})).into_response(),
        Some((error, message)) => {
            if let Some(suppressed) = crate::log_throttle::storage_failure("readyz") {
                tracing::warn!(%error, suppressed, "{message}");
            }
            ApiError::Unavailable(message.into()).into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}
