//! The generic HMAC scheme: a signature header holding HMAC-SHA1, -SHA256 or -SHA512 of the raw
//! body, or of a template of timestamp, headers and body, in hex or base64, after an optional
//! prefix (`sha256=`), with an optional timestamp header checked against a tolerance. GitHub
//! (`X-Hub-Signature-256: sha256=<hex of the body>`), Shopify (`X-Shopify-Hmac-Sha256: <base64
//! of the body>`) and Slack (`X-Slack-Signature: v0=<hex of "v0:{timestamp}:{body}">`) are
//! presets of it ([`HmacScheme::github`], [`HmacScheme::shopify`], [`HmacScheme::slack`]).
//!
//! The header may list several signatures separated by commas or spaces (one per secret while a
//! secret is rolled); each is decoded and compared in constant time with the HMAC under every
//! secret. The signature is checked before the timestamp, as Stripe's libraries do.

use hmac::{Hmac, Mac};
use subtle::ConstantTimeEq;

use super::{check_timestamp, Secret, VerifyError};
use base64::Engine as _;

/// The hash under the HMAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// HMAC-SHA1 (older senders only).
    Sha1,
    /// HMAC-SHA256.
    Sha256,
    /// HMAC-SHA512.
    Sha512,
}

impl Algorithm {
    /// `sha1`, `sha256` or `sha512`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "sha1" => Some(Self::Sha1),
            "sha256" => Some(Self::Sha256),
            "sha512" => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The name [`Algorithm::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
        }
    }

    /// The HMAC of the concatenated `parts` under `key`.
    pub fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac = match <M as hmac::digest::KeyInit>::new_from_slice(key) {
                Ok(mac) => mac,
                // HMAC accepts keys of any length.
                Err(_) => unreachable!("HMAC accepts keys of any length"),
            };
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Self::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
            Self::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
            Self::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
        }
    }
}

/// How the signature is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Hexadecimal (either case accepted).
    Hex,
    /// Standard base64 with padding.
    Base64,
}

impl Encoding {
    /// `hex` or `base64`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "hex" => Some(Self::Hex),
            "base64" => Some(Self::Base64),
            _ => None,
        }
    }

    /// The name [`Encoding::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hex => "hex",
            Self::Base64 => "base64",
        }
    }

    /// `bytes` written this way.
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Self::Hex => hex::encode(bytes),
            Self::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Self::Hex => hex::decode(text).ok(),
            Self::Base64 => base64::engine::general_purpose::STANDARD.decode(text).ok(),
        }
    }
}

/// A piece of what is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// Text as written.
    Literal(String),
    /// The raw body.
    Body,
    /// The timestamp header's value.
    Timestamp,
    /// Another header's value (lowercase name).
    Header(String),
}

/// What is signed, parsed from a template such as `{timestamp}.{body}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedContent(pub Vec<Signed>);

impl SignedContent {
    /// Just the body.
    pub fn body() -> Self {
        Self(vec![Signed::Body])
    }

    /// Parses a template of `{body}` (exactly once), `{timestamp}` and `{header.<name>}`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Signed::Literal(rest[..open].to_string()));
            }
            let Some(close) = rest[open..].find('}') else {
                return Err(format!("signedContent {text:?} has a `{{` without `}}`"));
            };
            let inner = &rest[open + 1..open + close];
            parts.push(match inner {
                "body" => Signed::Body,
                "timestamp" => Signed::Timestamp,
                _ => match inner.strip_prefix("header.") {
                    Some(name) if !name.is_empty() => Signed::Header(name.to_ascii_lowercase()),
                    _ => {
                        return Err(format!(
                            "signedContent {text:?}: `{{{inner}}}` is not {{body}}, {{timestamp}} or {{header.<name>}}"
                        ))
                    }
                },
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Signed::Literal(rest.to_string()));
        }
        if parts.iter().filter(|p| **p == Signed::Body).count() != 1 {
            return Err(format!(
                "signedContent {text:?} must contain {{body}} exactly once"
            ));
        }
        if parts
            .iter()
            .any(|p| matches!(p, Signed::Literal(l) if l.contains('}')))
        {
            return Err(format!("signedContent {text:?} has a `}}` without `{{`"));
        }
        Ok(Self(parts))
    }

    /// The template as [`SignedContent::parse`] reads it.
    pub fn template(&self) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Signed::Literal(l) => l.clone(),
                Signed::Body => "{body}".into(),
                Signed::Timestamp => "{timestamp}".into(),
                Signed::Header(h) => format!("{{header.{h}}}"),
            })
            .collect()
    }

    /// True when the timestamp is signed.
    pub fn has_timestamp(&self) -> bool {
        self.0.contains(&Signed::Timestamp)
    }
}

/// One HMAC scheme's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacScheme {
    /// The hash.
    pub algorithm: Algorithm,
    /// The header carrying the signature (lowercase).
    pub header: String,
    /// How the signature is written.
    pub encoding: Encoding,
    /// Text before each signature (`sha256=`, `v0=`), or empty.
    pub prefix: String,
    /// What is signed.
    pub signed: SignedContent,
    /// The header with the signing time in Unix seconds (required when it is signed).
    pub timestamp_header: Option<String>,
}

impl HmacScheme {
    /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    pub fn github() -> Self {
        Self {
            algorithm: Algorithm::Sha256,
            header: "x-hub-signature-256".into(),
            encoding: Encoding::Hex,
            prefix: "sha256=".into(),
            signed: SignedContent::body(),
            timestamp_header: None,
        }
    }

    /// Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the body>`.
    pub fn shopify() -> Self {
        Self {
            algorithm: Algorithm::Sha256,
            header: "x-shopify-hmac-sha256".into(),
            encoding: Encoding::Base64,
            prefix: String::new(),
            signed: SignedContent::body(),
            timestamp_header: None,
        }
    }

    /// Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{timestamp}:{body}">` with
    /// `X-Slack-Request-Timestamp`.
    pub fn slack() -> Self {
        Self {
            algorithm: Algorithm::Sha256,
            header: "x-slack-signature".into(),
            encoding: Encoding::Hex,
            prefix: "v0=".into(),
            signed: SignedContent(vec![
                Signed::Literal("v0:".into()),
                Signed::Timestamp,
                Signed::Literal(":".into()),
                Signed::Body,
            ]),
            timestamp_header: Some("x-slack-request-timestamp".into()),
        }
    }

    /// The signature of `body` under `key`, with the other signed values from `header`.
    fn mac(
        &self,
        key: &[u8],
        body: &[u8],
        header: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<u8>, VerifyError> {
        let mut owned: Vec<Vec<u8>> = Vec::new();
        for part in &self.signed.0 {
            owned.push(match part {
                Signed::Literal(l) => l.as_bytes().to_vec(),
                Signed::Body => Vec::new(),
                Signed::Timestamp => {
                    let name = self.timestamp_header.clone().unwrap_or_default();
                    header(&name)
                        .ok_or(VerifyError::MissingNamedHeader(name))?
                        .into_bytes()
                }
                Signed::Header(name) => header(name)
                    .ok_or_else(|| VerifyError::MissingNamedHeader(name.clone()))?
                    .into_bytes(),
            });
        }
        let parts: Vec<&[u8]> = self
            .signed
            .0
            .iter()
            .zip(&owned)
            .map(|(part, bytes)| match part {
                Signed::Body => body,
                _ => bytes.as_slice(),
            })
            .collect();
        Ok(self.algorithm.mac(key, &parts))
    }

    /// The header value a sender puts in [`HmacScheme::header`] for `body` signed with `secret`
    /// (the other signed values, the timestamp included, read from `header`).
    pub fn sign(
        &self,
        secret: &str,
        body: &[u8],
        header: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, VerifyError> {
        let mac = self.mac(secret.as_bytes(), body, header)?;
        Ok(format!("{}{}", self.prefix, self.encoding.encode(&mac)))
    }
}

/// Verifies deliveries of one [`HmacScheme`] against one or more secrets (used as their UTF-8
/// bytes). `Debug` never shows a secret.
#[derive(Clone)]
pub struct HmacVerifier {
    scheme: HmacScheme,
    secrets: Vec<Secret>,
    tolerance_secs: i64,
}

impl std::fmt::Debug for HmacVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HmacVerifier")
            .field("scheme", &self.scheme)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

impl HmacVerifier {
    /// A verifier of `scheme` accepting any of `secrets` (none, or an empty one, is refused).
    pub fn new(
        scheme: HmacScheme,
        secrets: &[String],
        tolerance_secs: i64,
    ) -> Result<Self, VerifyError> {
        if secrets.is_empty() {
            return Err(VerifyError::NoSecrets);
        }
        if secrets.iter().any(String::is_empty) {
            return Err(VerifyError::InvalidSecret("a signing secret is empty"));
        }
        Ok(Self {
            scheme,
            secrets: secrets
                .iter()
                .map(|s| Secret::new(s.as_bytes().to_vec()))
                .collect(),
            tolerance_secs: tolerance_secs.max(0),
        })
    }

    /// Checks a delivery: the signature header lists a signature (after the prefix) equal to the
    /// HMAC under some secret, then the timestamp (when the scheme has one) is within the
    /// tolerance of `now_unix`.
    pub fn verify(
        &self,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
        now_unix: i64,
    ) -> Result<(), VerifyError> {
        let scheme = &self.scheme;
        let value = header(&scheme.header)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| VerifyError::MissingNamedHeader(scheme.header.clone()))?;
        let timestamp = match &scheme.timestamp_header {
            Some(name) => {
                let text = header(name)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| VerifyError::MissingNamedHeader(name.clone()))?;
                if !text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(VerifyError::InvalidNamedTimestamp(name.clone()));
                }
                Some(
                    text.parse::<i64>()
                        .map_err(|_| VerifyError::InvalidNamedTimestamp(name.clone()))?,
                )
            }
            None => None,
        };
        let candidates: Vec<Vec<u8>> = value
            .split([',', ' '])
            .map(str::trim)
            .filter_map(|item| item.strip_prefix(scheme.prefix.as_str()))
            .filter_map(|sig| scheme.encoding.decode(sig))
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::MalformedHeader(format!(
                "{} holds no {}{} signature",
                scheme.header,
                scheme.prefix,
                scheme.encoding.as_str()
            )));
        }
        let mut matched = subtle::Choice::from(0);
        for secret in &self.secrets {
            let expected = scheme.mac(secret.key(), body, header)?;
            for candidate in &candidates {
                matched |= expected.ct_eq(candidate);
            }
        }
        if !bool::from(matched) {
            return Err(VerifyError::NoSignatureMatched);
        }
        match timestamp {
            Some(t) => check_timestamp(t, now_unix, self.tolerance_secs),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
