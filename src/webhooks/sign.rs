//! Signing a body exactly as a source's provider would, for `flare webhook send` and the
//! dashboard's **Send a test delivery**: the headers to send with the body.

use super::credential::Credential;
use super::hmac_scheme::Signed;
use super::source::{Preset, SourceSettings, Verification};
use super::{paddle, stripe, svix, VerifyError};

/// What a signed delivery needs besides the secret and body.
#[derive(Debug, Clone, Default)]
pub struct SignParams {
    /// Unix seconds to sign at.
    pub now_s: i64,
    /// The delivery id to send where the provider sends one in a header.
    pub delivery_id: String,
    /// The provider's event type where it travels in a header (GitHub's `X-GitHub-Event`,
    /// Shopify's `X-Shopify-Topic`).
    pub event: Option<String>,
}

/// The headers (name, value) that make `body` a delivery the source accepts under `secret`.
pub fn headers(
    settings: &SourceSettings,
    secret: &str,
    body: &[u8],
    params: &SignParams,
) -> Result<Vec<(String, String)>, VerifyError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let ts = params.now_s.to_string();
    match settings.preset {
        Some(Preset::Github) => {
            out.push((
                "X-GitHub-Event".into(),
                params.event.clone().unwrap_or_else(|| "ping".into()),
            ));
            out.push(("X-GitHub-Delivery".into(), params.delivery_id.clone()));
        }
        Some(Preset::Shopify) => {
            out.push((
                "X-Shopify-Topic".into(),
                params
                    .event
                    .clone()
                    .unwrap_or_else(|| "orders/create".into()),
            ));
            out.push(("X-Shopify-Webhook-Id".into(), params.delivery_id.clone()));
        }
        _ => {}
    }
    // A generic source's delivery-id rule naming a header: send the id there.
    if let Some(rule) = &settings.delivery_id {
        for name in rule.headers() {
            out.push((name.to_string(), params.delivery_id.clone()));
        }
    }
    match &settings.verification {
        Verification::Stripe => out.push((
            stripe::SIGNATURE_HEADER.into(),
            stripe::sign(secret, params.now_s, body),
        )),
        Verification::StandardWebhooks => {
            out.push(("webhook-id".into(), params.delivery_id.clone()));
            out.push(("webhook-timestamp".into(), ts.clone()));
            out.push((
                "webhook-signature".into(),
                svix::sign(secret, &params.delivery_id, params.now_s, body)?,
            ));
        }
        Verification::Paddle => out.push((
            paddle::SIGNATURE_HEADER.into(),
            paddle::sign(secret, params.now_s, body),
        )),
        Verification::Hmac(scheme) => {
            if let Some(name) = &scheme.timestamp_header {
                out.push((name.clone(), ts.clone()));
            }
            let known = out.clone();
            let header = move |name: &str| {
                known
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            for part in &scheme.signed.0 {
                if let Signed::Header(name) = part {
                    if header(name).is_none() {
                        return Err(VerifyError::MissingNamedHeader(name.clone()));
                    }
                }
            }
            let value = scheme.sign(secret, body, &header)?;
            out.push((scheme.header.clone(), value));
        }
        Verification::Bearer => out.push((
            "Authorization".into(),
            Credential::Bearer.header_value(secret),
        )),
        Verification::Basic => out.push((
            "Authorization".into(),
            Credential::Basic.header_value(secret),
        )),
        Verification::None => {}
    }
    Ok(out)
}
