//! Inbound webhooks: `POST /webhooks/payments` (Stripe-signed) and `POST /webhooks/auth`
//! (Clerk, signed with Svix / Standard Webhooks). Public routes: the signature is the credential.
//!
//! Each delivery goes through small steps:
//!
//! 1. **Verifier**: built once at startup from the configured secrets ([`Webhooks`]); none
//!    configured → 503 with a clear error, so the provider retries once it is set.
//! 2. **Verify** the signature over the raw body bytes, with the client's clock as "now" (so tests
//!    use a `ManualClock`). Bad or missing signature, stale timestamp → 400.
//! 3. **Map** the verified body to events ([`crate::webhooks::mapping`]). Malformed → 400.
//! 4. **Record** the delivery and all its events in one transaction
//!    ([`crate::store::Store::webhook_record`]). Event ids are `<provider>:<delivery id>:<n>`, and
//!    the delivery is unique per provider, so a retried delivery sends nothing twice: it answers
//!    200 with `duplicate: true` and the original event ids. Storage down → 503.
//!
//! Success: `200 {"received": true, "eventIds": [...], "duplicate": bool}`. A rejected delivery is
//! never stored in the database; the last [`REJECTIONS_KEPT`] per provider are kept in memory
//! (time, status, reason; never the body or headers), see [`Webhooks::rejections`]. Each rejection
//! is logged, but through a [`crate::log_throttle::LogThrottle`] per provider and status: the first line, then at most
//! one per 10 s with the number of rejections held back (`suppressed`).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::body::RawBody;
use super::{ApiError, AppState};
use crate::model::{validate_event_name, Source};
use crate::store::{NewEvent, NewWebhookDelivery};
pub use crate::webhooks::inbound::{Provider, Rejection, Webhooks, REJECTIONS_KEPT};
use crate::webhooks::mapping::{self, MappedEvent};
use crate::webhooks::stripe::SIGNATURE_HEADER;
use crate::webhooks::svix::SvixHeaders;
use crate::webhooks::VerifyError;

/// Longest provider delivery id accepted (event ids derived from it stay under 200 bytes).
const MAX_DELIVERY_ID_LEN: usize = 128;

/// The routes of this module (public: authenticated by signature).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/webhooks/payments", post(payments))
        .route("/webhooks/auth", post(auth))
}

fn unconfigured(provider: Provider, e: &VerifyError) -> ApiError {
    match e {
        VerifyError::NoSecrets => ApiError::Unavailable(format!(
            "the {} webhook is not configured: set {} on the server",
            provider.as_str(),
            provider.secret_variable()
        )),
        other => ApiError::Unavailable(format!(
            "the {} webhook is misconfigured ({other}): fix {} on the server",
            provider.as_str(),
            provider.secret_variable()
        )),
    }
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

/// What a verified, mapped delivery carries into the store.
struct Verified {
    delivery_id: String,
    event_type: String,
    events: Vec<MappedEvent>,
}

async fn payments(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<RawBody, ApiError>,
) -> Result<Json<Value>, ApiError> {
    deliver(&state, Provider::Payments, &headers, body).await
}

async fn auth(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<RawBody, ApiError>,
) -> Result<Json<Value>, ApiError> {
    deliver(&state, Provider::Auth, &headers, body).await
}

/// One delivery to `provider`'s route: verify and map it ([`verify`]), record it with
/// its events, and keep the reason of a refusal.
async fn deliver(
    state: &AppState,
    provider: Provider,
    headers: &HeaderMap,
    body: Result<RawBody, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let now_ms = state.client.clock().now_ms();
    let result = async {
        let RawBody(body) = body?;
        let verified = verify(
            provider,
            &state.webhooks,
            headers,
            &body,
            now_ms.div_euclid(1000),
        )?;
        record(state, provider, verified, body, now_ms).await
    }
    .await;
    if let Err(e) = &result {
        state
            .webhooks
            .reject(provider, now_ms, e.status().as_u16(), &e.to_string());
    }
    result
}

/// Checks the delivery's signature over the raw `body` with `provider`'s verifier (at `now_s`,
/// Unix seconds) and maps the verified body to events: the one step that differs per provider.
fn verify(
    provider: Provider,
    hooks: &Webhooks,
    headers: &HeaderMap,
    body: &[u8],
    now_s: i64,
) -> Result<Verified, ApiError> {
    match provider {
        Provider::Payments => {
            let verifier = hooks
                .stripe
                .as_ref()
                .map_err(|e| unconfigured(provider, e))?;
            let header = headers
                .get(SIGNATURE_HEADER)
                .ok_or_else(|| bad(VerifyError::MissingHeader(SIGNATURE_HEADER)))?
                .to_str()
                .map_err(|_| {
                    bad(VerifyError::MalformedHeader(
                        "Stripe-Signature is not ASCII".into(),
                    ))
                })?;
            verifier.verify(header, body, now_s).map_err(bad)?;
            let delivery = mapping::stripe_events(body).map_err(bad)?;
            Ok(Verified {
                delivery_id: delivery.id,
                event_type: delivery.event_type,
                events: delivery.events,
            })
        }
        Provider::Auth => {
            let verifier = hooks.svix.as_ref().map_err(|e| unconfigured(provider, e))?;
            let svix =
                SvixHeaders::from_lookup(|name| headers.get(name).and_then(|v| v.to_str().ok()))
                    .map_err(bad)?;
            verifier.verify(&svix, body, now_s).map_err(bad)?;
            let delivery = mapping::clerk_events(body).map_err(bad)?;
            Ok(Verified {
                delivery_id: svix.id,
                event_type: delivery.event_type,
                events: delivery.events,
            })
        }
    }
}

/// Stores the delivery with its events in one transaction and answers.
async fn record(
    state: &AppState,
    provider: Provider,
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
    let source = Source::Webhook(provider.as_str().into()).to_string();
    let context = json!({"webhook": {
        "provider": provider.as_str(),
        "deliveryId": delivery_id,
        "type": event_type,
    }});
    let mut rows = Vec::with_capacity(events.len());
    for (n, event) in events.into_iter().enumerate() {
        validate_event_name(&event.name).map_err(|e| ApiError::Internal(e.to_string()))?;
        rows.push(NewEvent {
            id: format!("{}:{delivery_id}:{n}", provider.as_str()),
            name: event.name,
            payload: event.payload,
            context: Some(context.clone()),
            source: source.clone(),
            parent_run_id: None,
            deliver_at: None,
            now,
        });
    }
    let recorded = state
        .client
        .store()
        .webhook_record(NewWebhookDelivery {
            provider: provider.as_str().into(),
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
    Ok(Json(json!({
        "received": true,
        "eventIds": recorded.event_ids,
        "duplicate": recorded.duplicate,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfigured_names_the_variable_not_a_secret() {
        let e = unconfigured(Provider::Payments, &VerifyError::NoSecrets);
        assert_eq!(e.status().as_u16(), 503);
        assert!(e.to_string().contains("STRIPE_WEBHOOK_SECRET"), "{e}");
    }
}
