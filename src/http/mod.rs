//! The HTTP application. [`app`] builds the router from an [`AppState`]; tests drive it with
//! `tower::ServiceExt::oneshot`, the server binds it to a listener.
//!
//! Routes: `GET /healthz` (the process is up), `GET /readyz` (storage answers).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

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
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.client.store().ping().await {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "storage is unavailable"})),
            )
                .into_response()
        }
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "no such route"})),
    )
        .into_response()
}
