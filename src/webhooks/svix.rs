//! Svix / Standard Webhooks signatures (used by Clerk and other authentication providers).
//!
//! A delivery carries three headers: a message id, a unix timestamp in seconds (digits only)
//! and a space-separated list of signatures `v1,<base64>`; each comes as `svix-*` or as the
//! unbranded `webhook-*` name. `v1` is HMAC-SHA256 over `"{id}.{timestamp}.{raw body}"` in
//! standard base64. The key is the standard-base64 decoding of the secret after an optional
//! `whsec_` prefix. Other schemes in the list (such as `v1a`, ed25519) are skipped; any `v1`
//! matching under any configured secret is enough.
//!
//! The timestamp must be within [`DEFAULT_TOLERANCE_SECS`] of the verifier's clock in both
//! directions (the boundary passes). Unlike the Svix libraries, which check the timestamp
//! first, Flare checks the signature first, as it does for Stripe: a timestamp error then
//! always describes an authentic (replayed or delayed) delivery.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use subtle::ConstantTimeEq;

use super::DEFAULT_TOLERANCE_SECS;
use super::{check_timestamp, hmac_sha256, parse_unix_secs, Secret, VerifyError};

/// Optional prefix of Svix / Standard Webhooks secrets.
pub const SECRET_PREFIX: &str = "whsec_";

/// Header names, branded first: `(svix, webhook)` for id, timestamp and signature.
const ID_HEADERS: (&str, &str) = ("svix-id", "webhook-id");
const TIMESTAMP_HEADERS: (&str, &str) = ("svix-timestamp", "webhook-timestamp");
const SIGNATURE_HEADERS: (&str, &str) = ("svix-signature", "webhook-signature");

/// The three signature headers of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvixHeaders {
    /// Message id (`svix-id` / `webhook-id`); also the delivery's dedupe key.
    pub id: String,
    /// Unix timestamp in seconds, exactly as sent (`svix-timestamp` / `webhook-timestamp`).
    pub timestamp: String,
    /// Space-separated signature list (`svix-signature` / `webhook-signature`).
    pub signature: String,
}

impl SvixHeaders {
    /// Collects the headers through `lookup`, which maps a lowercase header name to its value.
    ///
    /// For each header the `svix-*` name is preferred and `webhook-*` is the fallback; an empty
    /// value counts as absent. With `http::HeaderMap`:
    /// `SvixHeaders::from_lookup(|name| headers.get(name).and_then(|v| v.to_str().ok()))`.
    pub fn from_lookup<'a, F>(lookup: F) -> Result<Self, VerifyError>
    where
        F: Fn(&'static str) -> Option<&'a str>,
    {
        let get = |(branded, unbranded): (&'static str, &'static str),
                   missing: &'static str|
         -> Result<String, VerifyError> {
            [branded, unbranded]
                .into_iter()
                .filter_map(&lookup)
                .map(str::trim)
                .find(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or(VerifyError::MissingHeader(missing))
        };
        Ok(Self {
            id: get(ID_HEADERS, "svix-id (or webhook-id)")?,
            timestamp: get(TIMESTAMP_HEADERS, "svix-timestamp (or webhook-timestamp)")?,
            signature: get(SIGNATURE_HEADERS, "svix-signature (or webhook-signature)")?,
        })
    }
}

/// Verifies Svix / Standard Webhooks deliveries against one or more secrets.
///
/// `Debug` output shows how many secrets are configured, never their values.
#[derive(Clone)]
pub struct SvixVerifier {
    secrets: Vec<Secret>,
    tolerance_secs: i64,
}

impl std::fmt::Debug for SvixVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SvixVerifier")
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

impl SvixVerifier {
    /// Builds a verifier accepting signatures made with any of `secrets` (`whsec_<base64>` or
    /// bare base64), with [`DEFAULT_TOLERANCE_SECS`].
    ///
    /// Fails with [`VerifyError::NoSecrets`] when the list is empty and
    /// [`VerifyError::InvalidSecret`] when a secret is not valid standard base64 or decodes
    /// to nothing.
    pub fn new(secrets: Vec<String>) -> Result<Self, VerifyError> {
        if secrets.is_empty() {
            return Err(VerifyError::NoSecrets);
        }
        let secrets = secrets
            .iter()
            .map(|s| decode_secret(s).map(Secret::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            secrets,
            tolerance_secs: DEFAULT_TOLERANCE_SECS,
        })
    }

    /// Returns the verifier with a different timestamp tolerance, in seconds (negative values
    /// count as 0). Unlike Stripe's libraries, 0 does not disable the check: it requires the
    /// timestamp to equal `now_unix`.
    pub fn with_tolerance(mut self, tolerance_secs: i64) -> Self {
        self.tolerance_secs = tolerance_secs.max(0);
        self
    }

    /// Verifies a delivery: `headers` from [`SvixHeaders::from_lookup`], `body` the raw request
    /// bytes exactly as received, `now_unix` the current time in unix seconds.
    ///
    /// Checks, in order: the timestamp is digits only, the list has at least one `v1` entry,
    /// some `v1` matches under some secret (constant-time), and the timestamp is within the
    /// tolerance in both directions.
    pub fn verify(
        &self,
        headers: &SvixHeaders,
        body: &[u8],
        now_unix: i64,
    ) -> Result<(), VerifyError> {
        let timestamp = parse_unix_secs(&headers.timestamp, TIMESTAMP_HEADERS.0)?;
        let candidates: Vec<&str> = headers
            .signature
            .split(' ')
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| *version == "v1")
            .map(|(_, sig)| sig)
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::NoSupportedSignature);
        }
        let mut matched = subtle::Choice::from(0);
        for secret in &self.secrets {
            let expected = STANDARD.encode(signed_mac(
                secret.key(),
                &headers.id,
                &headers.timestamp,
                body,
            ));
            for candidate in &candidates {
                matched |= expected.as_bytes().ct_eq(candidate.as_bytes());
            }
        }
        if !bool::from(matched) {
            return Err(VerifyError::NoSignatureMatched);
        }
        check_timestamp(timestamp, now_unix, self.tolerance_secs)
    }
}

/// Signs `body` as message `id` at unix time `timestamp` and returns the signature header
/// value (`v1,<base64>`). Fails with [`VerifyError::InvalidSecret`] for an unusable secret.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, VerifyError> {
    let key = decode_secret(secret)?;
    let mac = signed_mac(&key, id, &timestamp.to_string(), body);
    Ok(format!("v1,{}", STANDARD.encode(mac)))
}

/// HMAC over `"{id}.{timestamp}.{body}"`.
fn signed_mac(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> [u8; 32] {
    hmac_sha256(
        key,
        &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    )
}

/// Strips an optional `whsec_` prefix and base64-decodes the rest.
fn decode_secret(secret: &str) -> Result<Vec<u8>, VerifyError> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    let key = STANDARD.decode(encoded).map_err(|_| {
        VerifyError::InvalidSecret(
            "a Svix secret is not valid base64 after the optional whsec_ prefix",
        )
    })?;
    if key.is_empty() {
        return Err(VerifyError::InvalidSecret("a Svix secret is empty"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::super::read_fixture;
    use super::*;
    use serde::Deserialize;
    use sha2::{Digest, Sha256};
    use std::collections::HashMap;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[derive(Deserialize)]
    struct VectorFile {
        tolerance_seconds: i64,
        cases: Vec<Case>,
    }

    #[derive(Deserialize)]
    struct Case {
        name: String,
        secret: String,
        msg_id: String,
        timestamp: serde_json::Value,
        body: Option<String>,
        body_file: Option<String>,
        body_sha256: String,
        signature_header: Option<String>,
        expected_signature: Option<String>,
        header_names: Option<String>,
        now: i64,
        expect: String,
    }

    impl Case {
        fn body(&self) -> Vec<u8> {
            let body = match (&self.body, &self.body_file) {
                (Some(body), None) => body.as_bytes().to_vec(),
                (None, Some(file)) => read_fixture(file),
                _ => panic!("case {}: needs exactly one of body/body_file", self.name),
            };
            assert_eq!(
                hex::encode(Sha256::digest(&body)),
                self.body_sha256,
                "case {}: body bytes differ from the vector (fixture reformatted?)",
                self.name
            );
            body
        }

        fn timestamp(&self) -> String {
            match &self.timestamp {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }
        }

        /// The delivery's headers under the vector's naming (`webhook-*` unless "svix").
        fn header_map(&self) -> HashMap<&'static str, String> {
            let svix = self.header_names.as_deref() == Some("svix");
            let pick = |(branded, unbranded): (&'static str, &'static str)| {
                if svix {
                    branded
                } else {
                    unbranded
                }
            };
            let mut map = HashMap::new();
            map.insert(pick(ID_HEADERS), self.msg_id.clone());
            map.insert(pick(TIMESTAMP_HEADERS), self.timestamp());
            if let Some(sig) = &self.signature_header {
                map.insert(pick(SIGNATURE_HEADERS), sig.clone());
            }
            map
        }
    }

    fn load_cases() -> Vec<Case> {
        let raw = read_fixture("signatures/standard_webhooks_vectors.json");
        let file: VectorFile = serde_json::from_slice(&raw).expect("vector file parses");
        assert_eq!(file.tolerance_seconds, DEFAULT_TOLERANCE_SECS);
        file.cases
    }

    fn expected_outcome(case: &Case) -> Result<(), VerifyError> {
        match case.expect.as_str() {
            "ok" => Ok(()),
            "error:timestamp_too_old" => Err(VerifyError::TimestampOutsideTolerance {
                age_secs: 301,
                tolerance_secs: 300,
            }),
            "error:timestamp_too_new" => Err(VerifyError::TimestampOutsideTolerance {
                age_secs: -301,
                tolerance_secs: 300,
            }),
            "error:no_matching_signature" => Err(VerifyError::NoSignatureMatched),
            "error:invalid_timestamp" => Err(VerifyError::InvalidTimestamp("svix-timestamp")),
            "error:missing_headers" => Err(VerifyError::MissingHeader(
                "svix-signature (or webhook-signature)",
            )),
            other => panic!("case {}: unknown expectation {other:?}", case.name),
        }
    }

    #[test]
    fn all_signature_vectors() {
        let cases = load_cases();
        assert_eq!(cases.len(), 13, "the vector file should hold 13 cases");
        for case in &cases {
            let body = case.body();
            let verifier = SvixVerifier::new(vec![case.secret.clone()])
                .unwrap_or_else(|e| panic!("case {}: building verifier: {e}", case.name));
            let map = case.header_map();
            let got = SvixHeaders::from_lookup(|name| map.get(name).map(String::as_str))
                .and_then(|headers| verifier.verify(&headers, &body, case.now));
            assert_eq!(got, expected_outcome(case), "case {}", case.name);
            if let Err(err) = got {
                let shown = format!("{err} {err:?} {verifier:?}");
                let bare = case.secret.trim_start_matches(SECRET_PREFIX);
                assert!(
                    !shown.contains(bare),
                    "case {}: leaks the secret",
                    case.name
                );
            }
        }
    }

    #[test]
    fn sign_reproduces_expected_signatures() {
        let mut checked = 0;
        for case in load_cases() {
            let Some(expected) = &case.expected_signature else {
                continue;
            };
            let timestamp = case.timestamp().parse::<i64>().expect("numeric timestamp");
            let got = sign(&case.secret, &case.msg_id, timestamp, &case.body())
                .unwrap_or_else(|e| panic!("case {}: {e}", case.name));
            assert_eq!(&got, expected, "case {}", case.name);
            checked += 1;
        }
        assert_eq!(checked, 4);
    }

    #[test]
    fn svix_names_are_preferred_over_webhook_names() {
        let map: HashMap<&str, &str> = HashMap::from([
            ("svix-id", "msg_svix"),
            ("webhook-id", "msg_webhook"),
            ("svix-timestamp", ""),
            ("webhook-timestamp", "17"),
            ("webhook-signature", "v1,abc"),
        ]);
        let headers = SvixHeaders::from_lookup(|name| map.get(name).copied()).expect("all present");
        assert_eq!(
            headers,
            SvixHeaders {
                id: "msg_svix".into(),
                timestamp: "17".into(),
                signature: "v1,abc".into(),
            }
        );
        let empty: HashMap<&str, &str> = HashMap::new();
        assert_eq!(
            SvixHeaders::from_lookup(|name| empty.get(name).copied()),
            Err(VerifyError::MissingHeader("svix-id (or webhook-id)"))
        );
    }

    fn headers_for(secret: &str, id: &str, ts: i64, body: &[u8]) -> SvixHeaders {
        SvixHeaders {
            id: id.into(),
            timestamp: ts.to_string(),
            signature: sign(secret, id, ts, body).expect("sign"),
        }
    }

    #[test]
    fn rotation_accepts_any_configured_secret() {
        let other = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        let body = b"{}";
        let headers = headers_for(other, "msg_1", 1_000, body);
        let both = SvixVerifier::new(vec![SECRET.into(), other.into()]).expect("verifier");
        assert_eq!(both.verify(&headers, body, 1_000), Ok(()));
        let one = SvixVerifier::new(vec![SECRET.into()]).expect("verifier");
        assert_eq!(
            one.verify(&headers, body, 1_000),
            Err(VerifyError::NoSignatureMatched)
        );
    }

    #[test]
    fn only_v1_entries_count() {
        let body = b"{}";
        let mut headers = headers_for(SECRET, "msg_1", 1_000, body);
        let b64 = headers.signature.trim_start_matches("v1,").to_owned();
        headers.signature = format!("v2,{b64} v1a,{b64}");
        let verifier = SvixVerifier::new(vec![SECRET.into()]).expect("verifier");
        assert_eq!(
            verifier.verify(&headers, body, 1_000),
            Err(VerifyError::NoSupportedSignature)
        );
        headers.signature = format!("v1,bm9wZQ== v1,{b64}");
        assert_eq!(verifier.verify(&headers, body, 1_000), Ok(()));
    }

    #[test]
    fn signature_is_checked_before_timestamp() {
        let body = b"{}";
        let headers = headers_for("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "m", 1_000, body);
        let verifier = SvixVerifier::new(vec![SECRET.into()]).expect("verifier");
        assert_eq!(
            verifier.verify(&headers, body, 1_000_000),
            Err(VerifyError::NoSignatureMatched)
        );
    }

    #[test]
    fn signed_timestamp_is_the_header_text() {
        // A signature over "1000" must not verify a header claiming "01000".
        let body = b"{}";
        let mut headers = headers_for(SECRET, "m", 1_000, body);
        headers.timestamp = "01000".into();
        let verifier = SvixVerifier::new(vec![SECRET.into()]).expect("verifier");
        assert_eq!(
            verifier.verify(&headers, body, 1_000),
            Err(VerifyError::NoSignatureMatched)
        );
    }

    #[test]
    fn custom_tolerance_is_applied() {
        let body = b"{}";
        let headers = headers_for(SECRET, "m", 1_000, body);
        let verifier = SvixVerifier::new(vec![SECRET.into()])
            .expect("verifier")
            .with_tolerance(5);
        assert_eq!(verifier.verify(&headers, body, 995), Ok(()));
        assert!(verifier.verify(&headers, body, 994).is_err());
        assert!(verifier.verify(&headers, body, 1_006).is_err());
    }

    #[test]
    fn invalid_secrets_are_rejected_without_echoing_them() {
        assert_eq!(
            SvixVerifier::new(vec![]).map(|_| ()),
            Err(VerifyError::NoSecrets)
        );
        for bad in [
            "whsec_not*base64!",
            "whsec_",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
        ] {
            let err = SvixVerifier::new(vec![bad.into()]).expect_err(bad);
            assert!(
                matches!(err, VerifyError::InvalidSecret(_)),
                "{bad}: {err:?}"
            );
            assert!(!err.to_string().contains(bad), "{bad}: {err}");
            assert!(sign(bad, "m", 1, b"").is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_is_redacted() {
        let verifier = SvixVerifier::new(vec![SECRET.into()]).expect("verifier");
        let shown = format!("{verifier:?}");
        assert!(!shown.contains("MfKQ9r8"), "{shown}");
        assert!(shown.contains("<1 redacted>"), "{shown}");
    }
}
