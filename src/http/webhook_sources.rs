//! Webhook sources in the JSON API (`/api/webhook-sources`): list, create (201; 400 saying what
//! is wrong; 409 for an id in use), read, update, delete; a source's recent deliveries and
//! rejections; a signed test delivery; and the replay of a stored delivery. Protected routes
//! (the API key). A source's secrets are never shown back: only how many it has.
//!
//! Sources given at start (`payments`, `auth` from the environment, those of the start-up file)
//! are listed and readable, and answer 409 to an update or a delete: they change where they are
//! defined.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::body::{JsonObject, RawBody};
use super::{ApiError, AppState};
use crate::store::StoredWebhookSource;
use crate::webhooks::fixtures;
use crate::webhooks::sign::{self, SignParams};
use crate::webhooks::source::{Origin, Preset, Source, SourceSpec};

/// Deliveries a source's page and `/deliveries` list.
pub const DELIVERIES_SHOWN: usize = 50;

/// The routes (all in the protected group).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/webhook-sources", get(list).post(create))
        .route(
            "/api/webhook-sources/{id}",
            get(one).put(update).delete(remove),
        )
        .route("/api/webhook-sources/{id}/deliveries", get(deliveries))
        .route("/api/webhook-sources/{id}/test", post(test_delivery))
        .route(
            "/api/webhook-sources/{id}/deliveries/{delivery}/replay",
            post(replay_route),
        )
}

/// Every source: those given at start, then the stored ones by id.
pub async fn all(state: &AppState) -> Result<Vec<Source>, ApiError> {
    let mut out: Vec<Source> = state.webhooks.configured_all().to_vec();
    for stored in state.client.store().webhook_sources_list().await? {
        out.push(Source::stored(&stored).map_err(ApiError::Internal)?);
    }
    Ok(out)
}

async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let views: Vec<Value> = all(&state).await?.iter().map(Source::view).collect();
    Ok(Json(json!({ "sources": views })).into_response())
}

/// The source `id`, or 404.
pub async fn get_source(state: &AppState, id: &str) -> Result<Source, ApiError> {
    super::webhooks::find(state, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no webhook source {id:?}")))
}

async fn one(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(get_source(&state, &id).await?.view()).into_response())
}

/// Creates a source from its JSON form (the API's body, the dashboard's form); the created source.
pub async fn create_source(state: &AppState, body: &Value) -> Result<Source, ApiError> {
    let spec = SourceSpec::parse(body).map_err(ApiError::BadRequest)?;
    let id = spec
        .id
        .ok_or_else(|| ApiError::BadRequest("id is required".into()))?;
    let secrets = spec.secrets.unwrap_or_default();
    if secrets.is_empty() && spec.settings.verified() {
        return Err(ApiError::BadRequest(
            "secret is required (a string, or a list while one is rotated); a source without verification needs \"scheme\": \"none\"".into(),
        ));
    }
    if state.webhooks.configured(&id).is_some() {
        return Err(ApiError::Conflict(format!(
            "a webhook source with id {id:?} exists already"
        )));
    }
    let now = state.client.clock().now_ms();
    let stored = StoredWebhookSource {
        id,
        definition: spec.settings.definition(),
        secrets,
        created_at: now,
        updated_at: now,
    };
    state
        .client
        .store()
        .webhook_source_create(stored.clone())
        .await?;
    Source::stored(&stored).map_err(ApiError::Internal)
}

async fn create(
    State(state): State<AppState>,
    JsonObject(body): JsonObject<Value>,
) -> Result<Response, ApiError> {
    let source = create_source(&state, &body).await?;
    Ok((StatusCode::CREATED, Json(source.view())).into_response())
}

fn given_at_start(source: &Source) -> ApiError {
    let place = match source.origin {
        Origin::Environment(variable) => format!("the environment ({variable})"),
        _ => "the webhook sources file given at start".to_string(),
    };
    ApiError::Conflict(format!(
        "the webhook source {:?} is defined in {place}; change it there",
        source.id
    ))
}

async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonObject(body): JsonObject<Value>,
) -> Result<Response, ApiError> {
    let current = get_source(&state, &id).await?;
    if current.origin != Origin::Api {
        return Err(given_at_start(&current));
    }
    let spec = SourceSpec::parse(&body).map_err(ApiError::BadRequest)?;
    if spec.id.as_ref().is_some_and(|given| *given != id) {
        return Err(ApiError::BadRequest(
            "id cannot change: create a new source and delete this one".into(),
        ));
    }
    let secrets = match spec.secrets {
        Some(s) => s,
        None => {
            let kept = current.secrets.clone();
            spec.settings.check_secrets(&kept).map_err(|e| {
                ApiError::BadRequest(format!(
                    "the source's current secrets do not fit the new scheme ({e}): give secret"
                ))
            })?;
            kept
        }
    };
    if secrets.is_empty() && spec.settings.verified() {
        return Err(ApiError::BadRequest("secret is required".into()));
    }
    let (created, _) = current.times.unwrap_or_default();
    let stored = StoredWebhookSource {
        id,
        definition: spec.settings.definition(),
        secrets,
        created_at: created,
        updated_at: state.client.clock().now_ms(),
    };
    state
        .client
        .store()
        .webhook_source_update(stored.clone())
        .await?;
    Ok(Json(Source::stored(&stored).map_err(ApiError::Internal)?.view()).into_response())
}

async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if let Some(source) = state.webhooks.configured(&id) {
        return Err(given_at_start(source));
    }
    if !state.client.store().webhook_source_delete(&id).await? {
        return Err(ApiError::NotFound(format!("no webhook source {id:?}")));
    }
    Ok(Json(json!({ "deleted": id })).into_response())
}

async fn deliveries(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let source = get_source(&state, &id).await?;
    let store = state.client.store();
    let deliveries = store
        .webhook_deliveries_list(Some(&source.id), DELIVERIES_SHOWN)
        .await?;
    let rejections = store
        .webhook_rejections_list(&source.id, crate::store::webhooks::REJECTIONS_STORED)
        .await?;
    Ok(Json(json!({ "deliveries": deliveries, "rejections": rejections })).into_response())
}

/// The bundled body for `source`'s test delivery, made unique where the provider's delivery id
/// is in the body (so each test is a new delivery), and the event type for its header.
fn test_body(source: &Source) -> (Vec<u8>, Option<String>) {
    let fixture = source.settings.preset.and_then(fixtures::first);
    let raw = fixture.map_or(fixtures::GENERIC, |f| f.body);
    let event = fixture.and_then(|f| f.event).map(str::to_string);
    let fresh = format!("test_{}", uuid::Uuid::now_v7().simple());
    let field = match source.settings.preset {
        Some(Preset::Stripe) => "id",
        Some(Preset::Paddle | Preset::Slack) => "event_id",
        Some(Preset::Database) | None => "flareTest",
        _ => return (raw.to_vec(), event),
    };
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(mut map)) => {
            let value = if field == "id" {
                format!("evt_{fresh}")
            } else {
                fresh
            };
            map.insert(field.into(), Value::String(value));
            (Value::Object(map).to_string().into_bytes(), event)
        }
        _ => (raw.to_vec(), event),
    }
}

/// Signs the source's test delivery with its first secret and delivers it through the same path
/// as a provider's; the delivery's answer and status.
pub async fn send_test(state: &AppState, source: &Source) -> Result<(StatusCode, Value), ApiError> {
    let (body, event) = test_body(source);
    let secret = match (source.secrets.first(), source.settings.verified()) {
        (Some(s), _) => s.clone(),
        (None, false) => String::new(),
        (None, true) => {
            return Err(ApiError::Unavailable(format!(
                "the {} webhook has no secret to sign a test delivery with",
                source.id
            )))
        }
    };
    let params = SignParams {
        now_s: state.client.clock().now_ms().div_euclid(1000),
        delivery_id: format!("flare-test-{}", uuid::Uuid::now_v7()),
        event,
    };
    let signed = sign::headers(&source.settings, &secret, &body, &params)
        .map_err(|e| ApiError::Internal(format!("cannot sign the test delivery: {e}")))?;
    let mut headers = HeaderMap::new();
    for (name, value) in signed {
        let name = HeaderName::try_from(name.to_ascii_lowercase())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let value = HeaderValue::try_from(value).map_err(|e| ApiError::Internal(e.to_string()))?;
        headers.insert(name, value);
    }
    match super::webhooks::deliver(state, source, &headers, Ok(RawBody(Bytes::from(body)))).await {
        Ok(Json(answer)) => Ok((StatusCode::OK, answer)),
        Err(e) => Ok((e.status(), json!({ "error": e.to_string() }))),
    }
}

async fn test_delivery(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let source = get_source(&state, &id).await?;
    let (status, answer) = send_test(&state, &source).await?;
    Ok(Json(json!({ "status": status.as_u16(), "answer": answer })).into_response())
}

/// Sends every event of a stored delivery again (each a new event, source `replay:<event id>`);
/// the new events' ids.
pub async fn replay(
    state: &AppState,
    source: &str,
    delivery: &str,
) -> Result<Vec<String>, ApiError> {
    let stored = state
        .client
        .store()
        .webhook_delivery_get(source, delivery)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no stored delivery {delivery:?} of source {source:?}"
            ))
        })?;
    let mut ids = Vec::with_capacity(stored.event_ids.len());
    for id in &stored.event_ids {
        ids.push(super::api::replay(state, id, None).await?.id);
    }
    Ok(ids)
}

async fn replay_route(
    State(state): State<AppState>,
    Path((id, delivery)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let ids = replay(&state, &id, &delivery).await?;
    Ok(Json(json!({ "replayed": delivery, "eventIds": ids })).into_response())
}
