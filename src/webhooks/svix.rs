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

/// Property tests: `verify` fuzzed with arbitrary headers, bodies and clocks (`proptest`, a bounded
/// number of cases each so `cargo test` stays quick).
#[cfg(test)]
mod properties {
    use hmac::{Hmac, Mac};
    use proptest::prelude::*;
    use proptest::sample::Index;
    use sha2::Sha256;
    use std::collections::HashMap;

    use super::super::strategies::{body, clock_offset, config, fresh, timestamp};
    use super::*;

    /// `v1,<base64>` computed here with the `hmac` crate, independently of [`sign`].
    fn reference_signature(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// A secret as configured (`whsec_<base64>` or bare base64) and the key it stands for.
    fn secret() -> impl Strategy<Value = (String, Vec<u8>)> {
        (prop::collection::vec(any::<u8>(), 1..64), any::<bool>()).prop_map(|(key, prefixed)| {
            let encoded = STANDARD.encode(&key);
            let text = if prefixed {
                format!("{SECRET_PREFIX}{encoded}")
            } else {
                encoded
            };
            (text, key)
        })
    }

    /// Message ids as senders make them, or any text.
    fn msg_id() -> impl Strategy<Value = String> {
        prop_oneof!["msg_[A-Za-z0-9]{1,27}", ".{1,40}"]
    }

    /// Signature-list entries that never match: stray `v1`s, other schemes, junk (no spaces).
    fn extra_entry() -> impl Strategy<Value = String> {
        prop_oneof![
            "v1,[A-Za-z0-9+/]{0,43}=?",
            "(v1a|v2|V1|v0),[A-Za-z0-9+/]{43}=",
            "[!-~]{0,12}",
            Just(String::new()),
        ]
    }

    /// One way of damaging a correctly signed delivery.
    #[derive(Debug, Clone)]
    enum Mutation {
        /// The delivery as signed.
        Intact,
        /// Non-matching entries before and after the real signature.
        ExtraEntries(Vec<String>, Vec<String>),
        /// One bit (of the low seven, so it stays ASCII) flipped in one signature character.
        FlipSignatureBit(Index, u8),
        /// One bit flipped in one body byte (a byte added to an empty body).
        FlipBodyBit(Index, u8),
        /// The same signature under another message id.
        OtherId(String),
        /// The same signature under another timestamp text (digits only, maybe zero-padded).
        OtherTimestamp(String),
        /// Signed with a key the verifier does not have.
        OtherSecret(Vec<u8>),
        /// The signature under another scheme name, so no `v1` is left.
        OtherScheme(&'static str),
        /// The signature list cut short.
        Truncated(Index),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let entries = || prop::collection::vec(extra_entry(), 0..4);
        prop_oneof![
            Just(Mutation::Intact),
            (entries(), entries()).prop_map(|(a, b)| Mutation::ExtraEntries(a, b)),
            (any::<Index>(), 0..7_u8).prop_map(|(i, b)| Mutation::FlipSignatureBit(i, b)),
            (any::<Index>(), 0..8_u8).prop_map(|(i, b)| Mutation::FlipBodyBit(i, b)),
            msg_id().prop_map(Mutation::OtherId),
            prop_oneof![
                timestamp().prop_map(|t| t.to_string()),
                timestamp().prop_map(|t| format!("0{t}")),
            ]
            .prop_map(Mutation::OtherTimestamp),
            prop::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::OtherSecret),
            prop::sample::select(vec!["v1a", "v2", "V1", "v0", "v1 ", ""])
                .prop_map(Mutation::OtherScheme),
            any::<Index>().prop_map(Mutation::Truncated),
        ]
    }

    /// Applies `mutation` to the delivery message `id`, signed with `key` at `t`, returning the
    /// damaged delivery and whether it is still correctly signed.
    fn apply(
        mutation: &Mutation,
        key: &[u8],
        id: &str,
        t: i64,
        body: Vec<u8>,
    ) -> (SvixHeaders, Vec<u8>, bool) {
        let timestamp = t.to_string();
        let signature = reference_signature(key, id, &timestamp, &body);
        let encoded = signature.trim_start_matches("v1,").to_owned();
        let headers = |id: &str, timestamp: &str, signature: String| SvixHeaders {
            id: id.into(),
            timestamp: timestamp.into(),
            signature,
        };
        match mutation {
            Mutation::Intact => (headers(id, &timestamp, signature), body, true),
            Mutation::ExtraEntries(before, after) => {
                let mut entries = before.clone();
                entries.push(signature);
                entries.extend(after.iter().cloned());
                (headers(id, &timestamp, entries.join(" ")), body, true)
            }
            Mutation::FlipSignatureBit(index, bit) => {
                let mut bytes = encoded.into_bytes();
                let i = index.index(bytes.len());
                bytes[i] ^= 1 << bit;
                let flipped = String::from_utf8(bytes).expect("still ASCII");
                (
                    headers(id, &timestamp, format!("v1,{flipped}")),
                    body,
                    false,
                )
            }
            Mutation::FlipBodyBit(index, bit) => {
                let mut body = body;
                if body.is_empty() {
                    body.push(1 << bit);
                } else {
                    let i = index.index(body.len());
                    body[i] ^= 1 << bit;
                }
                (headers(id, &timestamp, signature), body, false)
            }
            Mutation::OtherId(other) => (headers(other, &timestamp, signature), body, other == id),
            Mutation::OtherTimestamp(other) => {
                (headers(id, other, signature), body, *other == timestamp)
            }
            Mutation::OtherSecret(other) => {
                let resigned = reference_signature(other, id, &timestamp, &body);
                (headers(id, &timestamp, resigned), body, other == key)
            }
            Mutation::OtherScheme(scheme) => (
                headers(id, &timestamp, format!("{scheme},{encoded}")),
                body,
                false,
            ),
            Mutation::Truncated(index) => {
                let cut = index.index(signature.len());
                (
                    headers(id, &timestamp, signature[..cut].to_owned()),
                    body,
                    false,
                )
            }
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// A delivery signed with any one of the configured secrets (by [`sign`], which must agree
        /// with an HMAC computed here) is accepted exactly when its timestamp is within the
        /// tolerance of the clock, in either direction; a stale one is refused as such.
        #[test]
        fn signed_deliveries_are_accepted_exactly_when_fresh(
            secrets in prop::collection::vec(secret(), 1..4),
            which in any::<Index>(),
            id in msg_id(),
            t in timestamp(),
            body in body(),
            offset in clock_offset(),
            tolerance in prop_oneof![Just(DEFAULT_TOLERANCE_SECS), -5..1000_i64],
        ) {
            let (secret, key) = which.get(&secrets);
            let signature = sign(secret, &id, t, &body).expect("valid secret");
            prop_assert_eq!(&signature, &reference_signature(key, &id, &t.to_string(), &body));
            let headers = SvixHeaders { id, timestamp: t.to_string(), signature };
            let now = t.saturating_add(offset);
            let verifier = SvixVerifier::new(secrets.iter().map(|(s, _)| s.clone()).collect())
                .expect("valid secrets")
                .with_tolerance(tolerance);
            let got = verifier.verify(&headers, &body, now);
            if fresh(t, now, tolerance) {
                prop_assert_eq!(got, Ok(()));
            } else {
                let is_stale = matches!(got, Err(VerifyError::TimestampOutsideTolerance { .. }));
                prop_assert!(is_stale, "{:?}", got);
            }
        }

        /// Damaging a fresh, correctly signed delivery (a flipped bit in its signature or body,
        /// another id, timestamp text or key, another scheme, a cut) always gets it refused, while
        /// adding non-matching entries to the signature list does not.
        #[test]
        fn damaged_deliveries_are_refused(
            (secret, key) in secret(),
            id in msg_id(),
            t in timestamp(),
            body in body(),
            offset in -DEFAULT_TOLERANCE_SECS..=DEFAULT_TOLERANCE_SECS,
            mutation in mutation(),
        ) {
            let now = t.saturating_add(offset);
            let (headers, body, still_signed) = apply(&mutation, &key, &id, t, body);
            let verifier = SvixVerifier::new(vec![secret]).expect("valid secret");
            let got = verifier.verify(&headers, &body, now);
            let claimed = headers.timestamp.parse::<i64>().unwrap_or(t);
            if still_signed && fresh(claimed, now, DEFAULT_TOLERANCE_SECS) {
                prop_assert_eq!(&got, &Ok(()), "{:?}", headers);
            } else {
                prop_assert!(got.is_err(), "accepted {:?}", headers);
            }
            if matches!(mutation, Mutation::FlipSignatureBit(..) | Mutation::FlipBodyBit(..)) {
                prop_assert_eq!(got, Err(VerifyError::NoSignatureMatched));
            }
        }

        /// Arbitrary header values (anything at all, or shaped like real ones), with any body and
        /// any clock, never panic, in collecting the headers or in verifying, and are never
        /// accepted.
        #[test]
        fn arbitrary_headers_are_refused_without_panicking(
            values in prop::collection::vec(
                prop::option::of(prop_oneof![
                    any::<String>(),
                    "[0-9]{0,20}",
                    "(v1,[A-Za-z0-9+/]{0,44}={0,2} ?){0,3}",
                ]),
                6,
            ),
            body in body(),
            now in any::<i64>(),
        ) {
            let names = [
                "svix-id", "webhook-id", "svix-timestamp", "webhook-timestamp",
                "svix-signature", "webhook-signature",
            ];
            let map: HashMap<&str, &str> = names
                .iter()
                .zip(&values)
                .filter_map(|(name, value)| Some((*name, value.as_deref()?)))
                .collect();
            let verifier = SvixVerifier::new(vec!["whsec_ZnV6eg==".into()]).expect("secret");
            let got = SvixHeaders::from_lookup(|name| map.get(name).copied())
                .and_then(|headers| verifier.verify(&headers, &body, now));
            prop_assert!(got.is_err());
        }
    }
}
