//! Inbound webhooks: `POST /webhooks/{source id}`, one path for every source (`payments` and
//! `auth` from the environment, those of the start-up file, those created through the API).
//! Public routes: the signature (or credential) is what authenticates.
//!
//! Each delivery goes through small steps:
//!
//! 1. **Source**: the one given at start with that id, else the stored one; none → 404 with
//!    nothing more (the same answer as an unknown route, so ids cannot be probed).
//! 2. **Verify and map** ([`crate::webhooks::delivery::process`]) the raw body bytes with the
//!    source's scheme and secrets, the client's clock as "now" (tests use a `ManualClock`). No
//!    secret yet → 503 naming what to set; bad or missing signature, stale timestamp, malformed
//!    body → 400. A verified handshake (GitHub's `ping`, Slack's `url_verification`) is answered
//!    as the provider expects and stores nothing.
//! 3. **Record** the delivery and all its events in one transaction
//!    ([`crate::store::Store::webhook_record`]). Event ids are `<source>:<delivery id>:<n>`, and
//!    the delivery is unique per source, so a retried delivery sends nothing twice: it answers
//!    200 with `duplicate: true` and the original event ids. Storage down → 503.
//!
//! Success: `200 {"received": true, "eventIds": [...], "duplicate": bool}`. A rejected delivery
//! stores no event; its time, status and reason (never the body or headers) are kept per source,
//! in memory ([`Webhooks::rejections`], the last [`REJECTIONS_KEPT`]) and in the store (at most
//! ten a second per source), and logged through a [`LogThrottle`] per source and status: the first
//! line, then at most one per 10 s with the number held back (`suppressed`).
//!
//! [`LogThrottle`]: crate::log_throttle::LogThrottle

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::body::RawBody;
use super::{ApiError, AppState};
use crate::model::{validate_event_name, Source as EventSource};
use crate::store::{NewEvent, NewWebhookDelivery, WebhookRejection};
use crate::webhooks::delivery::{self, DeliveryError, Processed, Verified};
use crate::webhooks::inbound::record_outcome;
pub use crate::webhooks::inbound::{Provider, Rejection, Webhooks, REJECTIONS_KEPT};
use crate::webhooks::source::Source;

/// Longest provider delivery id accepted (event ids derived from it stay under 200 bytes).
pub const MAX_DELIVERY_ID_LEN: usize = 128;

/// The route of this module (public: authenticated by signature).
pub fn routes() -> Router<AppState> {
    Router::new().route("/webhooks/{source}", post(receive))
}

async fn receive(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<RawBody, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let source = find(&state, &id)
        .await?
        .ok_or_else(|| ApiError::NotFound("no such route".into()))?;
    deliver(&state, &source, &headers, body).await
}

/// The source with this id: given at start, else stored (`None`: there is none).
pub async fn find(state: &AppState, id: &str) -> Result<Option<Source>, ApiError> {
    if let Some(source) = state.webhooks.configured(id) {
        return Ok(Some(source.clone()));
    }
    match state.client.store().webhook_source_get(id).await? {
        Some(stored) => Source::stored(&stored)
            .map(Some)
            .map_err(ApiError::Internal),
        None => Ok(None),
    }
}

/// One delivery to `source`: verify and map it, record it with its events, and keep the
/// reason of a refusal. Also what the dashboard's test delivery runs.
pub async fn deliver(
    state: &AppState,
    source: &Source,
    headers: &HeaderMap,
    body: Result<RawBody, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let now_ms = state.client.clock().now_ms();
    let result = async {
        let RawBody(body) = body?;
        let processed = delivery::process(source, headers, &body, now_ms.div_euclid(1000))
            .map_err(|e| match e {
                DeliveryError::Unconfigured(m) => ApiError::Unavailable(m),
                DeliveryError::Refused(m) => ApiError::BadRequest(m),
            })?;
        match processed {
            Processed::Answer(answer) => {
                record_outcome(&source.id, "answered", 200);
                Ok(Json(answer))
            }
            Processed::Events(verified) => record(state, &source.id, verified, body, now_ms).await,
        }
    }
    .await;
    if let Err(e) = &result {
        let status = e.status().as_u16();
        let reason = e.to_string();
        if state.webhooks.reject(&source.id, now_ms, status, &reason) {
            let kept = state
                .client
                .store()
                .webhook_rejection_record(WebhookRejection {
                    source: source.id.clone(),
                    at: crate::model::ms_to_time(now_ms),
                    status,
                    reason,
                })
                .await;
            if let Err(error) = kept {
                if let Some(suppressed) = crate::log_throttle::storage_failure("webhook_rejection")
                {
                    tracing::warn!(%error, suppressed, "a webhook rejection could not be stored");
                }
            }
        }
    }
    result
}

/// Stores the delivery with its events in one transaction and answers.
async fn record(
    state: &AppState,
    source: &str,
    verified: Verified,
    body: Bytes,
    now: i64,
) -> Result<Json<Value>, ApiError> {
    let Verified {
        delivery_id,
        event_type,
        events,
    } = verified;
    if delivery_id.is_empty()
        || delivery_id.len() > MAX_DELIVERY_ID_LEN
        || delivery_id.chars().any(char::is_control)
    {
        return Err(ApiError::BadRequest(format!(
            "the delivery id must be 1 to {MAX_DELIVERY_ID_LEN} printable bytes"
        )));
    }
    let event_source = EventSource::Webhook(source.into()).to_string();
    let context = json!({"webhook": {
        "provider": source,
        "deliveryId": delivery_id,
        "type": event_type,
    }});
    let mut rows = Vec::with_capacity(events.len());
    for (n, event) in events.into_iter().enumerate() {
        validate_event_name(&event.name).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        rows.push(NewEvent {
            id: format!("{source}:{delivery_id}:{n}"),
            name: event.name,
            payload: event.payload,
            context: Some(context.clone()),
            source: event_source.clone(),
            parent_run_id: None,
            deliver_at: None,
            now,
        });
    }
    let recorded = state
        .client
        .store()
        .webhook_record(NewWebhookDelivery {
            provider: source.into(),
            delivery_id,
            event_type,
            raw_body: body.to_vec(),
            received_at: now,
            events: rows,
        })
        .await?;
    for event in &recorded.events {
        crate::metrics::event_received(&event.source);
    }
    record_outcome(
        source,
        if recorded.duplicate {
            "duplicate"
        } else {
            "accepted"
        },
        200,
    );
    Ok(Json(json!({
        "received": true,
        "eventIds": recorded.event_ids,
        "duplicate": recorded.duplicate,
    })))
}
