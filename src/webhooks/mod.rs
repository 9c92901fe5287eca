//! Inbound webhook verification and mapping.
//!
//! A webhook *source* ([`source`]) is a verification scheme, its secrets and the rules that make
//! a delivery an event; [`delivery`] runs one delivery through its source, [`inbound`] holds the
//! sources given at start and the refusals, [`sign`] signs as each provider does (for
//! `flare webhook send` and the dashboard's test delivery), [`fixtures`] are the bundled bodies.
//! Beside the two verifiers below, [`hmac_scheme`] is the generic HMAC scheme (GitHub, Shopify and Slack
//! are presets of it), [`paddle`] Paddle's `ts=…;h1=…`, [`credential`] bearer and basic;
//! [`providers`] maps GitHub, Shopify, Paddle, Slack and database-record bodies, [`template`]
//! fills the event-name and delivery-id rules of the others.
//!
//! The first two providers:
//!
//! - [`stripe`]: payment providers that sign like Stripe (`Stripe-Signature: t=…,v1=…`,
//!   HMAC-SHA256 over `"{t}.{raw body}"`, hex digest, secret used verbatim as the key);
//! - [`svix`]: authentication providers that deliver through Svix / Standard Webhooks, such as
//!   Clerk (`svix-id` / `svix-timestamp` / `svix-signature` or the `webhook-*` names,
//!   HMAC-SHA256 over `"{id}.{timestamp}.{raw body}"`, base64 digest, base64 secret).
//!
//! Both verifiers share one error type, [`VerifyError`], accept several secrets (for rotation),
//! compare signatures in constant time and take the current time as a parameter so tests never
//! depend on the wall clock. Only once a body is verified does [`mapping`] turn it into the
//! events Flare sends.
//!
//! Secrets never appear in `Debug` output or in error messages.
//!
//! Pure code: bytes, headers and secrets in, a verdict or events out. No routes, no storage
//! (`crate::http::webhooks` receives, verifies with these, and records).

pub mod credential;
pub mod delivery;
pub mod fixtures;
pub mod hmac_scheme;
pub mod inbound;
pub mod mapping;
pub mod paddle;
pub mod providers;
pub mod sign;
pub mod source;
pub mod stripe;
pub mod svix;
pub mod template;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far (in seconds) a webhook timestamp may be from the verifier's clock, in either
/// direction, before the delivery is rejected as a possible replay.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

/// Why a webhook delivery was rejected (or a verifier could not be built).
///
/// Every message is safe to return to the caller in a 4xx body and to log: none of them
/// contains a secret, and none echoes attacker-controlled header values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The verifier was built without any secret.
    #[error("no webhook signing secret is configured")]
    NoSecrets,
    /// A configured secret is unusable; the reason never contains the secret itself.
    #[error("invalid webhook signing secret: {0}")]
    InvalidSecret(&'static str),
    /// A required header is absent or empty (the value names the header).
    #[error("missing required header {0}")]
    MissingHeader(&'static str),
    /// A signature header is present but cannot be parsed.
    #[error("malformed signature header: {0}")]
    MalformedHeader(String),
    /// The timestamp header is not a whole, non-negative number of seconds.
    #[error("invalid timestamp in header {0}: expected a whole number of seconds")]
    InvalidTimestamp(&'static str),
    /// The signature header lists no signature in a supported scheme (`v1`); older or unknown
    /// schemes are never accepted, so a sender cannot downgrade the check.
    #[error("no signature with the expected scheme (v1) was found in the signature header")]
    NoSupportedSignature,
    /// No listed signature matches the body under any configured secret.
    #[error("no signature matches the payload; check the signing secret and that the raw body is passed unmodified")]
    NoSignatureMatched,
    /// A required header of a configured name is absent or empty.
    #[error("missing required header {0}")]
    MissingNamedHeader(String),
    /// A configured timestamp header is not a whole, non-negative number of seconds.
    #[error("invalid timestamp in header {0}: expected a whole number of seconds")]
    InvalidNamedTimestamp(String),
    /// The `Authorization` header does not carry the source's credential (bearer or basic).
    #[error("the Authorization header does not carry this source's credential")]
    CredentialMismatch,
    /// The signature is valid but the timestamp is too far from the verifier's clock.
    ///
    /// `age_secs` is `now - timestamp`: positive when the delivery is too old, negative when it
    /// claims to come from the future.
    #[error("webhook timestamp is outside the tolerance window ({age_secs} s from now, tolerance ±{tolerance_secs} s)")]
    TimestampOutsideTolerance {
        /// `now - timestamp`, in seconds.
        age_secs: i64,
        /// The tolerance that was exceeded, in seconds.
        tolerance_secs: i64,
    },
}

/// Key material for one signing secret. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(Vec<u8>);

impl Secret {
    /// Wraps raw key bytes.
    pub(crate) fn new(key: Vec<u8>) -> Self {
        Self(key)
    }

    /// The raw key bytes, for HMAC.
    pub(crate) fn key(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// HMAC-SHA256 of the concatenation of `parts`, keyed with `key`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        // HMAC accepts keys of any length (long keys are hashed first); this cannot happen.
        Err(_) => unreachable!("HMAC-SHA256 accepts keys of any length"),
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Checks `timestamp` against `now` (both unix seconds) with a symmetric `tolerance`.
///
/// Accepts `|now - timestamp| <= tolerance`; the boundary itself passes.
pub(crate) fn check_timestamp(timestamp: i64, now: i64, tolerance: i64) -> Result<(), VerifyError> {
    let age = now.saturating_sub(timestamp);
    if age > tolerance || age < tolerance.saturating_neg() {
        return Err(VerifyError::TimestampOutsideTolerance {
            age_secs: age,
            tolerance_secs: tolerance,
        });
    }
    Ok(())
}

/// Parses a timestamp made only of ASCII digits (no sign, no spaces, no fraction).
pub(crate) fn parse_unix_secs(value: &str, header: &'static str) -> Result<i64, VerifyError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::InvalidTimestamp(header));
    }
    value
        .parse::<i64>()
        .map_err(|_| VerifyError::InvalidTimestamp(header))
}

/// Reads a file under the crate's `fixtures/` directory (tests only).
#[cfg(test)]
pub(crate) fn read_fixture(relative: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/{relative}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {path}: {e}"))
}

/// What the verifiers' property tests share: their settings and the strategies for bodies and
/// times (tests only).
#[cfg(test)]
pub(crate) mod strategies {
    use proptest::prelude::*;

    /// 2,000 cases, nothing persisted.
    pub(crate) fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// Any body up to 256 bytes.
    pub(crate) fn body() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..256)
    }

    /// Mostly realistic times, sometimes anything a header can carry.
    pub(crate) fn timestamp() -> impl Strategy<Value = i64> {
        prop_oneof![1_500_000_000..2_000_000_000_i64, 0..=i64::MAX]
    }

    /// How far the verifier's clock is from the signed time: mostly near the window's edges.
    pub(crate) fn clock_offset() -> impl Strategy<Value = i64> {
        prop_oneof![-310..=310_i64, any::<i64>()]
    }

    /// Whether `now` is within `tolerance` of `t` (computed without overflow).
    pub(crate) fn fresh(t: i64, now: i64, tolerance: i64) -> bool {
        (i128::from(now) - i128::from(t)).abs() <= i128::from(tolerance.max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_is_redacted() {
        let secret = Secret::new(b"whsec_super_secret_value".to_vec());
        let shown = format!("{secret:?}");
        assert_eq!(shown, "Secret(<redacted>)");
        assert!(!shown.contains("super_secret"));
    }

    #[test]
    fn timestamp_boundaries_are_inclusive_in_both_directions() {
        assert_eq!(check_timestamp(1000, 1300, 300), Ok(()));
        assert_eq!(check_timestamp(1300, 1000, 300), Ok(()));
        assert_eq!(
            check_timestamp(1000, 1301, 300),
            Err(VerifyError::TimestampOutsideTolerance {
                age_secs: 301,
                tolerance_secs: 300
            })
        );
        assert_eq!(
            check_timestamp(1301, 1000, 300),
            Err(VerifyError::TimestampOutsideTolerance {
                age_secs: -301,
                tolerance_secs: 300
            })
        );
        // Extreme values must not overflow.
        assert!(check_timestamp(i64::MAX, i64::MIN, 300).is_err());
        assert!(check_timestamp(0, i64::MAX, 300).is_err());
    }

    #[test]
    fn timestamps_must_be_plain_digits() {
        assert_eq!(parse_unix_secs("1700000000", "t"), Ok(1_700_000_000));
        for bad in [
            "",
            "abc",
            "+1700000000",
            "-5",
            " 17",
            "17.5",
            "99999999999999999999",
        ] {
            assert_eq!(
                parse_unix_secs(bad, "t"),
                Err(VerifyError::InvalidTimestamp("t")),
                "input {bad:?}"
            );
        }
    }

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
