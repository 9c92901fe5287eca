//! A webhook source: where deliveries come in (`POST /webhooks/{id}`), how they are verified
//! (a [`Verification`] scheme and one or more secrets) and how they become events (a preset's
//! mapping, or an event-name [`Template`]; a delivery-id rule for deduplication).
//!
//! Sources are written as JSON (the API, the dashboard's form and the file given at start all
//! use [`SourceSpec::parse`]): the short form is `{"id": "github", "preset": "github", "secret":
//! "…"}`; a generic source names its `scheme` (`hmac`, `bearer`, `basic`, or an explicit `none`)
//! and its `eventName`. Every field is checked here, with a message naming what is wrong; the
//! stored form ([`SourceSettings::definition`]) never holds a secret, and [`Source::view`] never
//! shows one.

use serde_json::{json, Map, Value};

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme, SignedContent};
use super::svix::SvixVerifier;
use super::template::Template;
use super::DEFAULT_TOLERANCE_SECS;

/// Most secrets one source holds.
pub const MAX_SECRETS: usize = 10;
/// Longest secret, in bytes.
pub const MAX_SECRET_LEN: usize = 1000;
/// Longest source id, in bytes (event ids `<source>:<delivery id>:<n>` stay under 200 bytes).
pub const MAX_ID_LEN: usize = 48;
/// Widest replay window a source may have, in seconds.
pub const MAX_TOLERANCE_SECS: i64 = 86_400;

/// A provider whose scheme and mapping Flare knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Stripe (`Stripe-Signature`), today's `payments` mapping.
    Stripe,
    /// Standard Webhooks (Svix, Resend, …): events `<source id>.<type>`.
    StandardWebhooks,
    /// Clerk (Standard Webhooks), today's `auth` mapping.
    Clerk,
    /// GitHub (`X-Hub-Signature-256`).
    Github,
    /// Shopify (`X-Shopify-Hmac-Sha256`).
    Shopify,
    /// Paddle Billing (`Paddle-Signature`).
    Paddle,
    /// Slack (`X-Slack-Signature`, `v0`).
    Slack,
    /// Database-record webhooks as Supabase sends them, with a bearer credential.
    Database,
}

impl Preset {
    /// Every preset, in the order the docs list them.
    pub const ALL: [Preset; 8] = [
        Preset::Stripe,
        Preset::StandardWebhooks,
        Preset::Clerk,
        Preset::Github,
        Preset::Shopify,
        Preset::Paddle,
        Preset::Slack,
        Preset::Database,
    ];

    /// The preset's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Stripe => "stripe",
            Preset::StandardWebhooks => "standard-webhooks",
            Preset::Clerk => "clerk",
            Preset::Github => "github",
            Preset::Shopify => "shopify",
            Preset::Paddle => "paddle",
            Preset::Slack => "slack",
            Preset::Database => "database",
        }
    }

    /// The preset named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// How the preset's deliveries are verified.
    pub fn verification(self) -> Verification {
        match self {
            Preset::Stripe => Verification::Stripe,
            Preset::StandardWebhooks | Preset::Clerk => Verification::StandardWebhooks,
            Preset::Github => Verification::Hmac(HmacScheme::github()),
            Preset::Shopify => Verification::Hmac(HmacScheme::shopify()),
            Preset::Paddle => Verification::Paddle,
            Preset::Slack => Verification::Hmac(HmacScheme::slack()),
            Preset::Database => Verification::Bearer,
        }
    }

    /// The replay window the provider documents (its libraries' default).
    pub fn tolerance_secs(self) -> i64 {
        match self {
            Preset::Paddle => super::paddle::TOLERANCE_SECS,
            _ => DEFAULT_TOLERANCE_SECS,
        }
    }
}

/// How a source's deliveries are verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// `Stripe-Signature`.
    Stripe,
    /// Standard Webhooks / Svix headers.
    StandardWebhooks,
    /// `Paddle-Signature`.
    Paddle,
    /// A generic (or a preset's) HMAC scheme.
    Hmac(HmacScheme),
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// `Authorization: Basic …` of `user:password`.
    Basic,
    /// Nothing: anyone may deliver (created only with an explicit `"scheme": "none"`).
    None,
}

impl Verification {
    /// The scheme's name, as the API shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verification::Stripe => "stripe",
            Verification::StandardWebhooks => "standard-webhooks",
            Verification::Paddle => "paddle",
            Verification::Hmac(_) => "hmac",
            Verification::Bearer => "bearer",
            Verification::Basic => "basic",
            Verification::None => "none",
        }
    }

    /// True when the scheme signs a time (so a replay window applies).
    pub fn has_timestamp(&self) -> bool {
        match self {
            Verification::Stripe | Verification::StandardWebhooks | Verification::Paddle => true,
            Verification::Hmac(s) => s.timestamp_header.is_some(),
            Verification::Bearer | Verification::Basic | Verification::None => false,
        }
    }
}

/// Where a source was defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// From an environment variable (`payments`, `auth`), named here.
    Environment(&'static str),
    /// From the file given at start (`--webhook-sources`).
    File,
    /// Through the API or the dashboard (stored).
    Api,
}

impl Origin {
    /// `environment`, `file` or `api`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Origin::Environment(_) => "environment",
            Origin::File => "file",
            Origin::Api => "api",
        }
    }
}

/// What a source does with deliveries, without its id and secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSettings {
    /// The provider preset, if any.
    pub preset: Option<Preset>,
    /// The scheme.
    pub verification: Verification,
    /// The replay window, in seconds (where the scheme has a timestamp).
    pub tolerance_secs: i64,
    /// The event-name rule; `None`: the preset's mapping.
    pub event_name: Option<Template>,
    /// The delivery-id rule; `None`: the preset's (generic sources: a hash of the body).
    pub delivery_id: Option<Template>,
}

/// A source as the delivery path uses it. `Debug` never shows a secret.
#[derive(Clone)]
pub struct Source {
    /// The id: `/webhooks/{id}` and the events' source `webhook:{id}`.
    pub id: String,
    /// What it does.
    pub settings: SourceSettings,
    /// The secrets, any of which verifies (rotation).
    pub secrets: Vec<String>,
    /// Where it was defined.
    pub origin: Origin,
    /// Created and last changed, ms (stored sources).
    pub times: Option<(i64, i64)>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("id", &self.id)
            .field("settings", &self.settings)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("origin", &self.origin)
            .finish()
    }
}

/// A source read from JSON: its id (absent in an update's body), settings and secrets (absent:
/// an update keeps the stored ones).
#[derive(Clone, PartialEq, Eq)]
pub struct SourceSpec {
    /// The `id` field.
    pub id: Option<String>,
    /// Everything but the id and secrets.
    pub settings: SourceSettings,
    /// The `secret` field: one or a list.
    pub secrets: Option<Vec<String>>,
}

impl std::fmt::Debug for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceSpec")
            .field("id", &self.id)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

const FIELDS: &[&str] = &[
    "id",
    "preset",
    "scheme",
    "secret",
    "algorithm",
    "header",
    "encoding",
    "prefix",
    "signedContent",
    "timestampHeader",
    "toleranceSecs",
    "eventName",
    "deliveryId",
];

const HMAC_FIELDS: &[&str] = &[
    "algorithm",
    "header",
    "encoding",
    "prefix",
    "signedContent",
    "timestampHeader",
];

/// Checks a source id: 1 to [`MAX_ID_LEN`] bytes of lowercase letters, digits, `-` and `_`,
/// starting with a letter or digit.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.as_bytes()[0].is_ascii_alphanumeric()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "id must be 1 to {MAX_ID_LEN} lowercase letters, digits, `-` or `_`, starting with a letter or digit"
        ))
    }
}

fn text<'a>(map: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(format!("{field} must be a string")),
    }
}

fn header_name(field: &str, value: &str) -> Result<String, String> {
    let ok = !value.is_empty()
        && value.len() <= 100
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(format!(
            "{field} must be a header name (letters, digits, `-`, `_`)"
        ))
    }
}

fn secrets_of(value: &Value) -> Result<Vec<String>, String> {
    let list: Vec<&Value> = match value {
        Value::String(_) => vec![value],
        Value::Array(items) => items.iter().collect(),
        _ => return Err("secret must be a string or a list of strings".into()),
    };
    let mut out = Vec::with_capacity(list.len());
    for item in list {
        let Value::String(s) = item else {
            return Err("secret must be a string or a list of strings".into());
        };
        let s = s.trim();
        if s.is_empty() || s.len() > MAX_SECRET_LEN {
            return Err(format!("each secret must be 1 to {MAX_SECRET_LEN} bytes"));
        }
        if s.chars().any(char::is_control) {
            return Err("a secret must not contain control characters".into());
        }
        out.push(s.to_string());
    }
    if out.is_empty() || out.len() > MAX_SECRETS {
        return Err(format!("secret must list 1 to {MAX_SECRETS} secrets"));
    }
    Ok(out)
}

/// Fields of [`Source::view`] that a spec does not have.
const VIEW_ONLY: &[&str] = &[
    "verified",
    "secrets",
    "origin",
    "variable",
    "url",
    "createdAt",
    "updatedAt",
];

impl SourceSpec {
    /// Reads a source back from its [`Source::view`] (what `flare webhook send` gets from the
    /// API).
    pub fn from_view(view: &Value) -> Result<Self, String> {
        let mut view = view.clone();
        if let Value::Object(map) = &mut view {
            for field in VIEW_ONLY {
                map.remove(*field);
            }
            if map.contains_key("preset") {
                map.remove("scheme");
            }
        }
        Self::parse(&view)
    }

    /// Reads a source from a JSON object; the message of an error says which field is wrong.
    pub fn parse(value: &Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err("a source must be a JSON object".into());
        };
        if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(format!(
                "unknown field {unknown:?}; a source has {}",
                FIELDS.join(", ")
            ));
        }
        let id = text(map, "id")?.map(str::to_string);
        if let Some(id) = &id {
            check_id(id)?;
        }
        let preset = match text(map, "preset")? {
            None => None,
            Some(name) => Some(Preset::parse(name).ok_or_else(|| {
                format!(
                    "unknown preset {name:?}; presets: {}",
                    Preset::ALL.map(Preset::as_str).join(", ")
                )
            })?),
        };
        let scheme = text(map, "scheme")?;
        let verification = match (preset, scheme) {
            (Some(p), None) => p.verification(),
            (Some(_), Some(_)) => {
                return Err("give a preset or a scheme, not both".into());
            }
            (None, None) => {
                return Err(format!(
                    "a source needs a preset ({}) or a scheme (hmac, bearer, basic, or none for no verification)",
                    Preset::ALL.map(Preset::as_str).join(", ")
                ))
            }
            (None, Some("hmac")) => Verification::Hmac(hmac_scheme(map)?),
            (None, Some("bearer")) => Verification::Bearer,
            (None, Some("basic")) => Verification::Basic,
            (None, Some("none")) => Verification::None,
            (None, Some(other)) => {
                return Err(format!(
                    "unknown scheme {other:?}: use hmac, bearer, basic or none (or a preset)"
                ))
            }
        };
        if !matches!(verification, Verification::Hmac(_)) || preset.is_some() {
            if let Some(field) = HMAC_FIELDS.iter().find(|f| map.contains_key(**f)) {
                return Err(format!("{field} is for \"scheme\": \"hmac\" sources"));
            }
        }
        let tolerance_secs = match map.get("toleranceSecs") {
            None | Some(Value::Null) => {
                preset.map_or(DEFAULT_TOLERANCE_SECS, Preset::tolerance_secs)
            }
            Some(v) => {
                if !verification.has_timestamp() {
                    return Err(format!(
                        "toleranceSecs applies only where the scheme signs a time; this {} source has none",
                        verification.as_str()
                    ));
                }
                match v.as_i64() {
                    Some(n) if (1..=MAX_TOLERANCE_SECS).contains(&n) => n,
                    _ => {
                        return Err(format!(
                            "toleranceSecs must be a whole number of seconds from 1 to {MAX_TOLERANCE_SECS}"
                        ))
                    }
                }
            }
        };
        let template = |field: &str| -> Result<Option<Template>, String> {
            text(map, field)?
                .map(|t| Template::parse(t).map_err(|e| format!("{field}: {e}")))
                .transpose()
        };
        let event_name = template("eventName")?;
        if let Some(t) = &event_name {
            let sample = t.sample();
            crate::model::validate_event_name(&super::mapping::sanitize_name(&sample))
                .map_err(|e| format!("eventName: {e}"))?;
        } else if preset.is_none() {
            return Err(
                "eventName is required without a preset, e.g. \"acme.{payload.type}\"".into(),
            );
        }
        let delivery_id = template("deliveryId")?;
        if delivery_id.as_ref().is_some_and(Template::is_literal) {
            return Err("deliveryId must name a header or payload field, e.g. \"{header.x-request-id}\" or \"{payload.id}\"".into());
        }
        let secrets = map
            .get("secret")
            .filter(|v| !v.is_null())
            .map(secrets_of)
            .transpose()?;
        let settings = SourceSettings {
            preset,
            verification,
            tolerance_secs,
            event_name,
            delivery_id,
        };
        if let Some(secrets) = &secrets {
            settings.check_secrets(secrets)?;
        }
        Ok(Self {
            id,
            settings,
            secrets,
        })
    }
}

fn hmac_scheme(map: &Map<String, Value>) -> Result<HmacScheme, String> {
    let header = header_name(
        "header",
        text(map, "header")?
            .ok_or("a hmac source needs header: the header carrying the signature")?,
    )?;
    let algorithm = match text(map, "algorithm")? {
        None => Algorithm::Sha256,
        Some(a) => Algorithm::parse(a).ok_or("algorithm must be sha1, sha256 or sha512")?,
    };
    let encoding = match text(map, "encoding")? {
        None => Encoding::Hex,
        Some(e) => Encoding::parse(e).ok_or("encoding must be hex or base64")?,
    };
    let prefix = text(map, "prefix")?.unwrap_or("").to_string();
    if prefix.len() > 32 || prefix.contains([',', ' ']) {
        return Err("prefix must be at most 32 bytes, without commas or spaces".into());
    }
    let signed = match text(map, "signedContent")? {
        None => SignedContent::body(),
        Some(t) => SignedContent::parse(t)?,
    };
    let timestamp_header = text(map, "timestampHeader")?
        .map(|h| header_name("timestampHeader", h))
        .transpose()?;
    match (signed.has_timestamp(), &timestamp_header) {
        (true, None) => {
            return Err("signedContent signs {timestamp}: give timestampHeader, the header carrying it".into())
        }
        (false, Some(_)) => {
            return Err("timestampHeader needs signedContent to sign {timestamp} (an unsigned time proves nothing)".into())
        }
        _ => {}
    }
    Ok(HmacScheme {
        algorithm,
        header,
        encoding,
        prefix,
        signed,
        timestamp_header,
    })
}

impl SourceSettings {
    /// Checks `secrets` fit the scheme (none for `none`; `user:password` for basic; a
    /// `whsec_<base64>` secret for Standard Webhooks).
    pub fn check_secrets(&self, secrets: &[String]) -> Result<(), String> {
        match self.verification {
            Verification::None if !secrets.is_empty() => {
                Err("a source with \"scheme\": \"none\" takes no secret".into())
            }
            Verification::Basic if secrets.iter().any(|s| !s.contains(':')) => {
                Err("a basic source's secret is written user:password".into())
            }
            Verification::StandardWebhooks => SvixVerifier::new(secrets.to_vec())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// True unless the scheme is `none`.
    pub fn verified(&self) -> bool {
        self.verification != Verification::None
    }

    /// The settings as JSON, the form [`SourceSpec::parse`] reads (stored; no secret).
    pub fn definition(&self) -> Value {
        let mut out = Map::new();
        match self.preset {
            Some(p) => {
                out.insert("preset".into(), json!(p.as_str()));
            }
            None => {
                out.insert("scheme".into(), json!(self.verification.as_str()));
                if let Verification::Hmac(s) = &self.verification {
                    out.insert("algorithm".into(), json!(s.algorithm.as_str()));
                    out.insert("header".into(), json!(s.header));
                    out.insert("encoding".into(), json!(s.encoding.as_str()));
                    out.insert("prefix".into(), json!(s.prefix));
                    out.insert("signedContent".into(), json!(s.signed.template()));
                    if let Some(h) = &s.timestamp_header {
                        out.insert("timestampHeader".into(), json!(h));
                    }
                }
            }
        }
        if self.verification.has_timestamp() {
            out.insert("toleranceSecs".into(), json!(self.tolerance_secs));
        }
        if let Some(t) = &self.event_name {
            out.insert("eventName".into(), json!(t.as_str()));
        }
        if let Some(t) = &self.delivery_id {
            out.insert("deliveryId".into(), json!(t.as_str()));
        }
        Value::Object(out)
    }
}

impl Source {
    /// The source as the API and the dashboard show it: its settings, `scheme`, `verified`, the
    /// number of secrets (never one of them), `origin`, and `url` (the path to give the provider).
    pub fn view(&self) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), json!(self.id));
        if let Value::Object(fields) = self.settings.definition() {
            out.extend(fields);
        }
        out.insert("scheme".into(), json!(self.settings.verification.as_str()));
        out.insert("verified".into(), json!(self.settings.verified()));
        out.insert("secrets".into(), json!(self.secrets.len()));
        out.insert("origin".into(), json!(self.origin.as_str()));
        if let Origin::Environment(variable) = self.origin {
            out.insert("variable".into(), json!(variable));
        }
        out.insert("url".into(), json!(format!("/webhooks/{}", self.id)));
        if let Some((created, updated)) = self.times {
            out.insert("createdAt".into(), json!(crate::model::ms_to_time(created)));
            out.insert("updatedAt".into(), json!(crate::model::ms_to_time(updated)));
        }
        Value::Object(out)
    }

    /// A built-in source configured from an environment variable (`payments`, `auth`).
    pub fn environment(
        id: &str,
        preset: Preset,
        variable: &'static str,
        secrets: Vec<String>,
    ) -> Self {
        Self {
            id: id.to_string(),
            settings: SourceSettings {
                preset: Some(preset),
                verification: preset.verification(),
                tolerance_secs: preset.tolerance_secs(),
                event_name: None,
                delivery_id: None,
            },
            secrets,
            origin: Origin::Environment(variable),
            times: None,
        }
    }

    /// A source stored through the API, read back.
    pub fn stored(stored: &crate::store::StoredWebhookSource) -> Result<Self, String> {
        let spec = SourceSpec::parse(&stored.definition)
            .map_err(|e| format!("stored webhook source {}: {e}", stored.id))?;
        Ok(Self {
            id: stored.id.clone(),
            settings: spec.settings,
            secrets: stored.secrets.clone(),
            origin: Origin::Api,
            times: Some((stored.created_at, stored.updated_at)),
        })
    }
}

#[cfg(test)]
mod tests;
