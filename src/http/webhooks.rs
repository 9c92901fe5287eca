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
//! is logged, but through a [`LogThrottle`] per provider and status: the first line, then at most
//! one per 10 s with the number of rejections held back (`suppressed`).

use std::collections::VecDeque;
use std::sync::Mutex;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::body::RawBody;
use super::{ApiError, AppState};
use crate::config::ServeConfig;
use crate::log_throttle::LogThrottle;
use crate::model::{ms_to_time, validate_event_name, Source};
use crate::store::{NewEvent, NewWebhookDelivery};
use crate::webhooks::mapping::{self, MappedEvent};
use crate::webhooks::stripe::{StripeVerifier, SIGNATURE_HEADER};
use crate::webhooks::svix::{SvixHeaders, SvixVerifier};
use crate::webhooks::VerifyError;

/// Rejected deliveries kept in memory per provider.
pub const REJECTIONS_KEPT: usize = 100;

/// Longest provider delivery id accepted (event ids derived from it stay under 200 bytes).
const MAX_DELIVERY_ID_LEN: usize = 128;

/// The routes of this module (public: authenticated by signature).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/webhooks/payments", post(payments))
        .route("/webhooks/auth", post(auth))
}

/// A webhook route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `/webhooks/payments`, Stripe-compatible.
    Payments,
    /// `/webhooks/auth`, Clerk / Svix.
    Auth,
}

impl Provider {
    /// `payments` or `auth`: the route's last segment and the `webhook:<provider>` source.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Payments => "payments",
            Provider::Auth => "auth",
        }
    }

    fn secret_variable(self) -> &'static str {
        match self {
            Provider::Payments => "STRIPE_WEBHOOK_SECRET",
            Provider::Auth => "CLERK_WEBHOOK_SECRET",
        }
    }

    fn index(self) -> usize {
        match self {
            Provider::Payments => 0,
            Provider::Auth => 1,
        }
    }
}

/// A rejected delivery, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// When it was rejected.
    pub at: DateTime<Utc>,
    /// The HTTP status answered (400, 413, 503).
    pub status: u16,
    /// Why (safe to show: no secret, no body, no header value).
    pub reason: String,
}

/// The verifiers, built once from the configuration, and the recent rejections.
#[derive(Debug)]
pub struct Webhooks {
    stripe: Result<StripeVerifier, VerifyError>,
    svix: Result<SvixVerifier, VerifyError>,
    rejections: Mutex<[VecDeque<Rejection>; 2]>,
    /// Rejection log lines, summarised per provider and status.
    log: LogThrottle,
}

impl Webhooks {
    /// Builds the verifiers from the secrets (an empty list leaves that route unconfigured).
    pub fn new(stripe_secrets: Vec<String>, clerk_secrets: Vec<String>) -> Self {
        Self {
            stripe: StripeVerifier::new(stripe_secrets),
            svix: SvixVerifier::new(clerk_secrets),
            rejections: Mutex::new([VecDeque::new(), VecDeque::new()]),
            log: LogThrottle::default(),
        }
    }

    /// Builds the verifiers from `STRIPE_WEBHOOK_SECRET` / `CLERK_WEBHOOK_SECRET`.
    pub fn from_config(config: &ServeConfig) -> Self {
        Self::new(config.stripe_secrets.clone(), config.clerk_secrets.clone())
    }

    /// The last rejected deliveries of `provider` (at most [`REJECTIONS_KEPT`]), newest first.
    pub fn rejections(&self, provider: Provider) -> Vec<Rejection> {
        self.rejections
            .lock()
            .map(|r| r[provider.index()].iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    fn reject(&self, provider: Provider, now_ms: i64, error: &ApiError) {
        let status = error.status().as_u16();
        let kind = format!("webhook:{}:{status}", provider.as_str());
        if let Some(suppressed) = self.log.admit(&kind, now_ms) {
            tracing::warn!(
                provider = provider.as_str(),
                status,
                reason = %error,
                suppressed,
                "webhook delivery rejected"
            );
        }
        if let Ok(mut all) = self.rejections.lock() {
            let ring = &mut all[provider.index()];
            if ring.len() >= REJECTIONS_KEPT {
                ring.pop_front();
            }
            ring.push_back(Rejection {
                at: ms_to_time(now_ms),
                status: error.status().as_u16(),
                reason: error.to_string(),
            });
        }
    }
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

/// One delivery to `provider`'s route: verify and map it ([`Provider::verify`]), record it with
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
        let verified = provider.verify(&state.webhooks, headers, &body, now_ms.div_euclid(1000))?;
        record(state, provider, verified, body, now_ms).await
    }
    .await;
    if let Err(e) = &result {
        state.webhooks.reject(provider, now_ms, e);
    }
    result
}

impl Provider {
    /// Checks the delivery's signature over the raw `body` with this provider's verifier (at
    /// `now_s`, Unix seconds) and maps the verified body to events: the one step that differs per
    /// provider.
    fn verify(
        self,
        hooks: &Webhooks,
        headers: &HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<Verified, ApiError> {
        match self {
            Provider::Payments => {
                let verifier = hooks.stripe.as_ref().map_err(|e| unconfigured(self, e))?;
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
                let verifier = hooks.svix.as_ref().map_err(|e| unconfigured(self, e))?;
                let svix = SvixHeaders::from_lookup(|name| {
                    headers.get(name).and_then(|v| v.to_str().ok())
                })
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
    fn the_ring_keeps_the_last_hundred_newest_first() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        for i in 0..(REJECTIONS_KEPT as i64 + 5) {
            hooks.reject(
                Provider::Auth,
                i * 1000,
                &ApiError::BadRequest(format!("r{i}")),
            );
        }
        let kept = hooks.rejections(Provider::Auth);
        assert_eq!(kept.len(), REJECTIONS_KEPT);
        assert_eq!(kept[0].reason, format!("r{}", REJECTIONS_KEPT + 4));
        assert_eq!(kept[REJECTIONS_KEPT - 1].reason, "r5");
        assert!(hooks.rejections(Provider::Payments).is_empty());
    }

    /// The log lines `f` writes.
    #[test]
    fn a_flood_of_rejections_writes_a_line_then_a_summary_per_ten_seconds() {
        let hooks = Webhooks::new(Vec::new(), Vec::new());
        let bad = ApiError::BadRequest("no valid signature".into());
        let lines = crate::log_throttle::logged(|| {
            for ms in 0..10_000 {
                hooks.reject(Provider::Payments, ms, &bad);
            }
            hooks.reject(Provider::Payments, 10_000, &bad);
            hooks.reject(Provider::Auth, 10_001, &bad);
            hooks.reject(
                Provider::Payments,
                10_002,
                &ApiError::Unavailable("not configured".into()),
            );
        });
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].contains("suppressed=0"), "{}", lines[0]);
        assert!(lines[1].contains("suppressed=9999"), "{}", lines[1]);
        assert!(lines[2].contains("provider=\"auth\""), "{}", lines[2]);
        assert!(lines[3].contains("status=503"), "{}", lines[3]);
        assert_eq!(
            hooks.rejections(Provider::Payments).len(),
            REJECTIONS_KEPT,
            "the dashboard still sees them"
        );
    }

    #[test]
    fn unconfigured_names_the_variable_not_a_secret() {
        let e = unconfigured(Provider::Payments, &VerifyError::NoSecrets);
        assert_eq!(e.status().as_u16(), 503);
        assert!(e.to_string().contains("STRIPE_WEBHOOK_SECRET"), "{e}");
    }
}
