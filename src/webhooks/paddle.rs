//! Paddle Billing's webhook signature (`Paddle-Signature: ts=<unix seconds>;h1=<hex>`): HMAC-SHA256
//! over `"{ts}:{raw body}"`, keyed with the endpoint's secret key (`pdl_ntfset_…`) as UTF-8, hex.
//! Several `h1` may be listed while a secret is rotated. Paddle's SDKs allow 5 seconds between
//! `ts` and their clock ([`TOLERANCE_SECS`]); a source may widen it.

use subtle::ConstantTimeEq;

use super::{check_timestamp, hmac_sha256, parse_unix_secs, Secret, VerifyError};

/// The header Paddle signs deliveries with.
pub const SIGNATURE_HEADER: &str = "Paddle-Signature";

/// Paddle's SDKs' window: 5 seconds.
pub const TOLERANCE_SECS: i64 = 5;

/// Verifies `Paddle-Signature` against one or more secrets; `Debug` never shows them.
#[derive(Clone)]
pub struct PaddleVerifier {
    secrets: Vec<Secret>,
    tolerance_secs: i64,
}

impl std::fmt::Debug for PaddleVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaddleVerifier")
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

impl PaddleVerifier {
    /// A verifier accepting any of `secrets` within `tolerance_secs`.
    pub fn new(secrets: &[String], tolerance_secs: i64) -> Result<Self, VerifyError> {
        if secrets.is_empty() {
            return Err(VerifyError::NoSecrets);
        }
        if secrets.iter().any(String::is_empty) {
            return Err(VerifyError::InvalidSecret("a Paddle secret key is empty"));
        }
        Ok(Self {
            secrets: secrets
                .iter()
                .map(|s| Secret::new(s.as_bytes().to_vec()))
                .collect(),
            tolerance_secs: tolerance_secs.max(0),
        })
    }

    /// Checks `header` (the `Paddle-Signature` value) over `body` at `now_unix`: some `h1`
    /// matches under some secret, then `ts` is within the tolerance.
    pub fn verify(&self, header: &str, body: &[u8], now_unix: i64) -> Result<(), VerifyError> {
        let mut ts = None;
        let mut signatures = Vec::new();
        for item in header.split(';') {
            let Some((key, value)) = item.trim().split_once('=') else {
                continue;
            };
            match key {
                "ts" if ts.is_some() => {
                    return Err(VerifyError::MalformedHeader(
                        "Paddle-Signature has more than one ts".into(),
                    ))
                }
                "ts" => ts = Some(parse_unix_secs(value, SIGNATURE_HEADER)?),
                "h1" => signatures.push(value),
                _ => {}
            }
        }
        let ts = ts.ok_or_else(|| {
            VerifyError::MalformedHeader("Paddle-Signature has no ts=<unix seconds>".into())
        })?;
        if signatures.is_empty() {
            return Err(VerifyError::NoSupportedSignature);
        }
        let stamp = ts.to_string();
        let mut matched = subtle::Choice::from(0);
        for secret in &self.secrets {
            let expected = hex::encode(hmac_sha256(secret.key(), &[stamp.as_bytes(), b":", body]));
            for candidate in &signatures {
                matched |= expected.as_bytes().ct_eq(candidate.as_bytes());
            }
        }
        if !bool::from(matched) {
            return Err(VerifyError::NoSignatureMatched);
        }
        check_timestamp(ts, now_unix, self.tolerance_secs)
    }
}

/// The `Paddle-Signature` value for `body` signed with `secret` at `ts`.
pub fn sign(secret: &str, ts: i64, body: &[u8]) -> String {
    let stamp = ts.to_string();
    let mac = hmac_sha256(secret.as_bytes(), &[stamp.as_bytes(), b":", body]);
    format!("ts={stamp};h1={}", hex::encode(mac))
}
