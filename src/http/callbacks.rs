//! `POST /callbacks/{token}`: the answer to a run's callback (`io.callback`), open without the
//! API key (the token is the credential). The body must be JSON, at most [`CALLBACK_BODY_LIMIT`]
//! bytes; an unknown, used or expired token is a 404 and changes nothing.

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::body::RawBody;
use super::error::ApiError;
use super::state::AppState;

/// Largest callback body, in bytes.
pub const CALLBACK_BODY_LIMIT: usize = 256 * 1024;

/// The route.
pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/callbacks/{token}",
        post(answer).layer(DefaultBodyLimit::max(CALLBACK_BODY_LIMIT)),
    )
}

async fn answer(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Result<RawBody, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let RawBody(bytes) = body?;
    let body: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("the callback body must be JSON: {e}")))?;
    let now = state.client.clock().now_ms();
    if state
        .client
        .store()
        .callback_resolve(&token, body, now)
        .await?
    {
        Ok(Json(json!({ "resumed": true })))
    } else {
        Err(ApiError::NotFound(
            "no such callback: unknown, already answered or past its deadline".into(),
        ))
    }
}
