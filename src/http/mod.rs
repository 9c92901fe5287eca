//! The HTTP application. [`app`] builds the router from an [`AppState`]; tests drive it with
//! `tower::ServiceExt::oneshot`, the server binds it to a listener.
//!
//! Routes are split in two: [`public_routes`] (health, readiness, and the webhook routes, which are
//! authenticated by their signatures) and [`protected_routes`] (everything else), which need the API
//! key when one is configured.

pub mod api;
pub mod error;
pub mod openapi;

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

pub use error::ApiError;

use crate::client::Client;
use crate::config::ServeConfig;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The client (store, engine).
    pub client: Client,
    /// The server's configuration.
    pub config: Arc<ServeConfig>,
}

/// Builds the router.
pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(public_routes())
        .merge(protected_routes())
        .fallback(not_found)
        .with_state(state)
}

/// Routes open without the API key.
pub fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// Routes that need the API key when one is configured.
pub fn protected_routes() -> Router<AppState> {
    Router::new().merge(api::routes())
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    state.client.store().ping().await?;
    Ok(Json(json!({"status": "ready"})).into_response())
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}
