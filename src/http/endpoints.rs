//! HTTP job endpoints in the JSON API (`/api/endpoints`, `/api/nodes`): register, list, re-index
//! and remove the applications that serve jobs at a URL (see [`crate::endpoints`]). These routes
//! are in the protected group: with `FLARE_API_KEY` set only an operator holding the key can make
//! Flare call a URL.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::JsonObject;
use super::{ApiError, AppState};
use crate::store::endpoints::Protocol;

/// The routes (all in the protected group).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/endpoints", get(list).post(add))
        .route("/api/endpoints/{id}", get(one).delete(remove))
        .route("/api/endpoints/{id}/index", post(reindex))
        .route("/api/nodes", get(nodes))
}

/// `POST /api/endpoints`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRequest {
    url: String,
    /// Flare's protocol: the signing secret. `trigger.dev-v2`: the endpoint's API key.
    #[serde(default)]
    secret: Option<String>,
    /// `flare` (default) or `trigger.dev-v2`.
    #[serde(default)]
    protocol: Option<String>,
    /// `trigger.dev-v2`: the `TriggerClient`'s id.
    #[serde(default, rename = "clientId")]
    client_id: Option<String>,
}

async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let endpoints = state.endpoints.list().await?;
    Ok(Json(json!({ "endpoints": endpoints })).into_response())
}

async fn one(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(state.endpoints.get(&id).await?).into_response())
}

async fn add(
    State(state): State<AppState>,
    JsonObject(req): JsonObject<AddRequest>,
) -> Result<Response, ApiError> {
    let protocol = match req.protocol.as_deref() {
        None => Protocol::Flare,
        Some(p) => Protocol::parse(p).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unknown protocol {p:?}: use \"flare\" or \"trigger.dev-v2\""
            ))
        })?,
    };
    if protocol == Protocol::Flare && req.client_id.is_some() {
        return Err(ApiError::BadRequest(
            "clientId is for the trigger.dev-v2 protocol".into(),
        ));
    }
    let summary = state
        .endpoints
        .add_with(&req.url, req.secret, protocol, req.client_id)
        .await?;
    Ok((StatusCode::CREATED, Json(summary)).into_response())
}

async fn reindex(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (summary, applied) = state.endpoints.reindex(&id).await?;
    let mut body = serde_json::to_value(&summary).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut body {
        fields.insert("removedJobs".into(), json!(applied.removed));
        fields.insert("cancelledRuns".into(), json!(applied.cancelled_runs));
    }
    Ok(Json(body).into_response())
}

async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let applied = state.endpoints.remove(&id).await?;
    Ok(Json(json!({
        "removed": id,
        "removedJobs": applied.removed,
        "cancelledRuns": applied.cancelled_runs,
    }))
    .into_response())
}

async fn nodes(State(state): State<AppState>) -> Result<Response, ApiError> {
    let now = state.client.clock().now_ms();
    let nodes = state.client.store().nodes_list(now).await?;
    Ok(Json(json!({ "nodes": nodes })).into_response())
}
