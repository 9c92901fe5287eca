//! One delivery through its source: [`process`] verifies the raw body with the source's scheme
//! and secrets, then maps it to events (the preset's mapping, or the source's templates) with
//! the delivery id that deduplicates it. Pure: headers, bytes, a source and the time in; a
//! verdict out. Recording is the HTTP layer's (`crate::http::webhooks`).

use axum::http::HeaderMap;
use serde_json::Value;

use super::credential::{self, Credential};
use super::hmac_scheme::HmacVerifier;
use super::mapping::{self, MappedEvent};
use super::paddle::{self, PaddleVerifier};
use super::providers::{self, Mapped};
use super::source::{Origin, Preset, Source, Verification};
use super::stripe::{self, StripeVerifier};
use super::svix::{SvixHeaders, SvixVerifier};
use super::VerifyError;

/// A verified delivery, ready to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The dedupe key.
    pub delivery_id: String,
    /// The provider's type.
    pub event_type: String,
    /// The events, in order.
    pub events: Vec<MappedEvent>,
}

/// What a delivery comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Processed {
    /// Events to record.
    Events(Verified),
    /// A verified handshake, answered with this body and nothing stored.
    Answer(Value),
}

/// Why a delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The source cannot verify anything yet (no secret set): 503, so the provider retries.
    #[error("{0}")]
    Unconfigured(String),
    /// Bad or missing signature, stale timestamp, malformed body: 400.
    #[error("{0}")]
    Refused(String),
}

fn refused(e: impl std::fmt::Display) -> DeliveryError {
    DeliveryError::Refused(e.to_string())
}

/// What the unconfigured built-in sources answer (their environment variable named).
fn unconfigured(source: &Source, e: &VerifyError) -> DeliveryError {
    let how = match &source.origin {
        Origin::Environment(variable) => format!("{variable} on the server"),
        Origin::File => "the webhook sources file".to_string(),
        Origin::Api => "its secret through the API or the dashboard".to_string(),
    };
    DeliveryError::Unconfigured(match e {
        VerifyError::NoSecrets => format!("the {} webhook is not configured: set {how}", source.id),
        other => format!(
            "the {} webhook is misconfigured ({other}): fix {how}",
            source.id
        ),
    })
}

/// Lowercase name → value, for header values that are visible ASCII.
fn lookup(headers: &HeaderMap) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// Verifies `body` for `source` at `now_s` (Unix seconds) and maps it.
pub fn process(
    source: &Source,
    headers: &HeaderMap,
    body: &[u8],
    now_s: i64,
) -> Result<Processed, DeliveryError> {
    let header = lookup(headers);
    let settings = &source.settings;
    let tolerance = settings.tolerance_secs;
    // Standard Webhooks' id is its delivery id, read while verifying.
    let mut header_id = None;
    match &settings.verification {
        Verification::Stripe => {
            let verifier = StripeVerifier::new(source.secrets.clone())
                .map_err(|e| unconfigured(source, &e))?
                .with_tolerance(tolerance);
            let value = headers
                .get(stripe::SIGNATURE_HEADER)
                .ok_or_else(|| refused(VerifyError::MissingHeader(stripe::SIGNATURE_HEADER)))?
                .to_str()
                .map_err(|_| {
                    refused(VerifyError::MalformedHeader(
                        "Stripe-Signature is not ASCII".into(),
                    ))
                })?;
            verifier.verify(value, body, now_s).map_err(refused)?;
        }
        Verification::StandardWebhooks => {
            let verifier = SvixVerifier::new(source.secrets.clone())
                .map_err(|e| unconfigured(source, &e))?
                .with_tolerance(tolerance);
            let svix =
                SvixHeaders::from_lookup(|name| headers.get(name).and_then(|v| v.to_str().ok()))
                    .map_err(refused)?;
            verifier.verify(&svix, body, now_s).map_err(refused)?;
            header_id = Some(svix.id);
        }
        Verification::Paddle => {
            let verifier = PaddleVerifier::new(&source.secrets, tolerance)
                .map_err(|e| unconfigured(source, &e))?;
            let value = header("paddle-signature")
                .filter(|v| !v.is_empty())
                .ok_or_else(|| refused(VerifyError::MissingHeader(paddle::SIGNATURE_HEADER)))?;
            verifier.verify(&value, body, now_s).map_err(refused)?;
        }
        Verification::Hmac(scheme) => {
            let verifier = HmacVerifier::new(scheme.clone(), &source.secrets, tolerance)
                .map_err(|e| unconfigured(source, &e))?;
            verifier.verify(&header, body, now_s).map_err(refused)?;
        }
        Verification::Bearer | Verification::Basic => {
            let kind = if settings.verification == Verification::Bearer {
                Credential::Bearer
            } else {
                Credential::Basic
            };
            if source.secrets.is_empty() {
                return Err(unconfigured(source, &VerifyError::NoSecrets));
            }
            kind.verify(header(credential::HEADER).as_deref(), &source.secrets)
                .map_err(refused)?;
        }
        Verification::None => {}
    }
    map(source, &header, body, header_id)
}

/// Maps a verified body (see [`providers`] and [`mapping`]).
fn map(
    source: &Source,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    header_id: Option<String>,
) -> Result<Processed, DeliveryError> {
    let settings = &source.settings;
    let mapped = match (&settings.event_name, settings.preset) {
        (None, Some(Preset::Stripe)) => {
            let d = mapping::stripe_events(body).map_err(refused)?;
            Mapped::Events {
                delivery_id: Some(d.id),
                event_type: d.event_type,
                events: d.events,
            }
        }
        (None, Some(Preset::Clerk)) => {
            let d = mapping::clerk_events(body).map_err(refused)?;
            Mapped::Events {
                delivery_id: None,
                event_type: d.event_type,
                events: d.events,
            }
        }
        (rule, preset) => {
            let payload = providers::json_body(body).map_err(refused)?;
            match (rule, preset) {
                (Some(rule), _) => providers::template(rule, payload, header),
                (None, Some(Preset::Github)) => providers::github(payload, header),
                (None, Some(Preset::Shopify)) => providers::shopify(payload, header),
                (None, Some(Preset::Paddle)) => providers::paddle(payload),
                (None, Some(Preset::Slack)) => providers::slack(payload, body),
                (None, Some(Preset::Database)) => providers::database(payload, body),
                (None, Some(Preset::StandardWebhooks)) => providers::standard(&source.id, payload),
                // Parsing refuses a source without a preset or an event name.
                (None, _) => Err("the source has no event-name rule".to_string()),
            }
            .map_err(DeliveryError::Refused)?
        }
    };
    match mapped {
        Mapped::Answer(answer) => Ok(Processed::Answer(answer)),
        Mapped::Events {
            delivery_id,
            event_type,
            events,
        } => {
            let delivery_id = match &settings.delivery_id {
                Some(rule) => {
                    let payload = providers::json_body(body).map_err(refused)?;
                    rule.fill(&payload, header).map_err(refused)?
                }
                None => delivery_id
                    .or(header_id)
                    .unwrap_or_else(|| providers::body_hash(body)),
            };
            Ok(Processed::Events(Verified {
                delivery_id,
                event_type,
                events,
            }))
        }
    }
}
