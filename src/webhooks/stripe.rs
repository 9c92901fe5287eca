//! Stripe-compatible webhook signatures (`Stripe-Signature`).
//!
//! The header is a comma-separated list of `key=value` items: one `t=<unix seconds>` and one or
//! more `v1=<lowercase hex>`; `v0` (Stripe's fake test-mode scheme) and unknown keys are ignored.
//! Each `v1` is HMAC-SHA256 over `"{t}.{raw body}"`, keyed with the UTF-8 bytes of the *whole*
//! secret string, `whsec_` prefix included (the secret is not base64-decoded, and is used
//! verbatim: trim configuration values before passing them in).
//!
//! Like Stripe's own libraries, [`StripeVerifier::verify`] accepts the delivery when *any* `v1`
//! matches under *any* configured secret (Stripe sends one `v1` per active secret while a
//! secret is being rolled), and checks the signature before the timestamp.
//!
//! **Timestamp policy.** Stripe's libraries reject only timestamps older than the tolerance
//! (`now - t > 300`, so an age of exactly 300 s passes) and accept any future timestamp. Flare
//! also rejects timestamps more than the tolerance *ahead* of its clock (`t - now > 300`), the
//! same window Standard Webhooks uses, so a signed delivery cannot be post-dated to stay
//! replayable. Stripe signs with its own current time, so real deliveries are unaffected unless
//! the server's clock is more than five minutes behind.

use subtle::ConstantTimeEq;

use super::DEFAULT_TOLERANCE_SECS;
use super::{check_timestamp, hmac_sha256, parse_unix_secs, Secret, VerifyError};

/// The name of the header Stripe signs deliveries with.
pub const SIGNATURE_HEADER: &str = "Stripe-Signature";

/// The only signature scheme accepted.
const SCHEME: &str = "v1";

/// Verifies `Stripe-Signature` headers against one or more signing secrets.
///
/// `Debug` output shows how many secrets are configured, never their values.
#[derive(Clone)]
pub struct StripeVerifier {
    secrets: Vec<Secret>,
    tolerance_secs: i64,
}

impl std::fmt::Debug for StripeVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeVerifier")
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

/// The parts of a `Stripe-Signature` header that matter.
#[derive(Debug, PartialEq, Eq)]
struct ParsedHeader<'a> {
    timestamp: i64,
    signatures: Vec<&'a str>,
}

impl StripeVerifier {
    /// Builds a verifier accepting signatures made with any of `secrets` (the current secret
    /// and, during a rotation, the previous one), with [`DEFAULT_TOLERANCE_SECS`].
    ///
    /// Each secret is used verbatim (typically `whsec_…`). Fails with
    /// [`VerifyError::NoSecrets`] when the list is empty and [`VerifyError::InvalidSecret`]
    /// when a secret is empty.
    pub fn new(secrets: Vec<String>) -> Result<Self, VerifyError> {
        if secrets.is_empty() {
            return Err(VerifyError::NoSecrets);
        }
        if secrets.iter().any(String::is_empty) {
            return Err(VerifyError::InvalidSecret(
                "a Stripe signing secret is empty",
            ));
        }
        Ok(Self {
            secrets: secrets
                .into_iter()
                .map(|s| Secret::new(s.into_bytes()))
                .collect(),
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

    /// Verifies a delivery: `header` is the `Stripe-Signature` value, `body` the raw request
    /// bytes exactly as received, `now_unix` the current time in unix seconds.
    ///
    /// Checks, in order: the header is present, it has one `t=` and at least one `v1=`, some
    /// `v1` matches under some secret (constant-time), and `t` is within the tolerance of
    /// `now_unix` (see the module docs for the future-timestamp policy).
    pub fn verify(&self, header: &str, body: &[u8], now_unix: i64) -> Result<(), VerifyError> {
        let parsed = parse_header(header)?;
        let timestamp = parsed.timestamp.to_string();
        let mut matched = subtle::Choice::from(0);
        for secret in &self.secrets {
            let expected = hex::encode(hmac_sha256(
                secret.key(),
                &[timestamp.as_bytes(), b".", body],
            ));
            for candidate in &parsed.signatures {
                matched |= expected.as_bytes().ct_eq(candidate.as_bytes());
            }
        }
        if !bool::from(matched) {
            return Err(VerifyError::NoSignatureMatched);
        }
        check_timestamp(parsed.timestamp, now_unix, self.tolerance_secs)
    }
}

/// Produces a complete `Stripe-Signature` header value (`t=<t>,v1=<hex>`) for `body` signed at
/// unix time `t` with `secret` (used verbatim, `whsec_` included). Useful for tests and for
/// documenting how a sender signs.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    let timestamp = t.to_string();
    let mac = hmac_sha256(secret.as_bytes(), &[timestamp.as_bytes(), b".", body]);
    format!("t={timestamp},{SCHEME}={}", hex::encode(mac))
}

/// Splits the header into its timestamp and `v1` signatures.
///
/// Items are trimmed; items without `=` and keys other than `t` and `v1` are ignored, as in
/// Stripe's libraries. A repeated `t` is rejected because it is ambiguous.
fn parse_header(header: &str) -> Result<ParsedHeader<'_>, VerifyError> {
    let header = header.trim();
    if header.is_empty() {
        return Err(VerifyError::MissingHeader(SIGNATURE_HEADER));
    }
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(',') {
        let Some((key, value)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" if timestamp.is_some() => {
                return Err(VerifyError::MalformedHeader(format!(
                    "{SIGNATURE_HEADER} has more than one timestamp (t=)"
                )));
            }
            "t" => timestamp = Some(parse_unix_secs(value, SIGNATURE_HEADER)?),
            SCHEME => signatures.push(value),
            _ => {}
        }
    }
    let Some(timestamp) = timestamp else {
        return Err(VerifyError::MalformedHeader(format!(
            "unable to extract a timestamp (t=) from {SIGNATURE_HEADER}"
        )));
    };
    if signatures.is_empty() {
        return Err(VerifyError::NoSupportedSignature);
    }
    Ok(ParsedHeader {
        timestamp,
        signatures,
    })
}

#[cfg(test)]
mod tests {
    use super::super::read_fixture;
    use super::*;
    use serde::Deserialize;
    use sha2::{Digest, Sha256};

    const SECRET: &str = "whsec_test_secret_for_unit_tests_only";

    #[derive(Deserialize)]
    struct VectorFile {
        tolerance_seconds: i64,
        cases: Vec<Case>,
    }

    #[derive(Deserialize)]
    struct Case {
        name: String,
        secret: String,
        body: Option<String>,
        body_file: Option<String>,
        body_sha256: String,
        header: String,
        now: i64,
        expect: String,
    }

    fn load_cases() -> Vec<Case> {
        let raw = read_fixture("signatures/stripe_signature_vectors.json");
        let file: VectorFile = serde_json::from_slice(&raw).expect("vector file parses");
        assert_eq!(file.tolerance_seconds, DEFAULT_TOLERANCE_SECS);
        file.cases
    }

    fn case_body(case: &Case) -> Vec<u8> {
        let body = match (&case.body, &case.body_file) {
            (Some(body), None) => body.as_bytes().to_vec(),
            (None, Some(file)) => read_fixture(file),
            _ => panic!("case {}: needs exactly one of body/body_file", case.name),
        };
        assert_eq!(
            hex::encode(Sha256::digest(&body)),
            case.body_sha256,
            "case {}: body bytes differ from the vector (fixture reformatted?)",
            case.name
        );
        body
    }

    /// The outcome each vector's `expect` string stands for.
    fn expected_outcome(case: &Case) -> Result<(), VerifyError> {
        match (case.name.as_str(), case.expect.as_str()) {
            // Deliberate deviation (see module docs): Stripe's libraries accept any future t;
            // Flare rejects t more than the tolerance ahead. Here t = now + 1000.
            ("future_timestamp", "ok") => Err(VerifyError::TimestampOutsideTolerance {
                age_secs: -1000,
                tolerance_secs: 300,
            }),
            (_, "ok") => Ok(()),
            (_, "error:timestamp_outside_tolerance") => {
                Err(VerifyError::TimestampOutsideTolerance {
                    age_secs: case.now - 1_700_000_000,
                    tolerance_secs: 300,
                })
            }
            (_, "error:no_signatures_with_expected_scheme") => {
                Err(VerifyError::NoSupportedSignature)
            }
            (_, "error:no_matching_signature") => Err(VerifyError::NoSignatureMatched),
            (_, "error:unable_to_extract_timestamp") => Err(VerifyError::MalformedHeader(
                "unable to extract a timestamp (t=) from Stripe-Signature".into(),
            )),
            (_, "error:no_signature_header") => Err(VerifyError::MissingHeader(SIGNATURE_HEADER)),
            (name, other) => panic!("case {name}: unknown expectation {other:?}"),
        }
    }

    #[test]
    fn all_signature_vectors() {
        let cases = load_cases();
        assert_eq!(cases.len(), 14, "the vector file should hold 14 cases");
        for case in &cases {
            let body = case_body(case);
            let verifier = StripeVerifier::new(vec![case.secret.clone()])
                .unwrap_or_else(|e| panic!("case {}: building verifier: {e}", case.name));
            let got = verifier.verify(&case.header, &body, case.now);
            assert_eq!(got, expected_outcome(case), "case {}", case.name);
            if let Err(err) = got {
                let shown = format!("{err} {err:?} {verifier:?}");
                assert!(
                    !shown.contains(case.secret.trim()),
                    "case {}: output leaks the secret",
                    case.name
                );
            }
        }
    }

    #[test]
    fn sign_reproduces_vector_headers() {
        for case in load_cases() {
            if case.expect != "ok" || case.header.matches("v1=").count() != 1 {
                continue;
            }
            let body = case_body(&case);
            assert_eq!(
                sign(&case.secret, 1_700_000_000, &body),
                case.header,
                "case {}",
                case.name
            );
        }
    }

    #[test]
    fn any_configured_secret_may_match() {
        let body = br#"{"id":"evt_1"}"#;
        let header = sign(SECRET, 1_700_000_000, body);
        let old_first =
            StripeVerifier::new(vec!["whsec_old".into(), SECRET.into()]).expect("two secrets");
        assert_eq!(old_first.verify(&header, body, 1_700_000_000), Ok(()));
        let only_old = StripeVerifier::new(vec!["whsec_old".into()]).expect("one secret");
        assert_eq!(
            only_old.verify(&header, body, 1_700_000_000),
            Err(VerifyError::NoSignatureMatched)
        );
    }

    #[test]
    fn signature_is_checked_before_timestamp() {
        let body = b"{}";
        let header = sign("whsec_someone_else", 1_000, body);
        let verifier = StripeVerifier::new(vec![SECRET.into()]).expect("verifier");
        // Stale *and* wrong: the signature error wins, so stale errors always mean authentic.
        assert_eq!(
            verifier.verify(&header, body, 1_000_000),
            Err(VerifyError::NoSignatureMatched)
        );
    }

    #[test]
    fn future_timestamps_within_tolerance_pass() {
        let body = b"{}";
        let header = sign(SECRET, 1_300, body);
        let verifier = StripeVerifier::new(vec![SECRET.into()]).expect("verifier");
        assert_eq!(verifier.verify(&header, body, 1_000), Ok(()));
        assert!(verifier.verify(&header, body, 999).is_err());
    }

    #[test]
    fn custom_tolerance_is_applied() {
        let body = b"{}";
        let header = sign(SECRET, 1_000, body);
        let verifier = StripeVerifier::new(vec![SECRET.into()])
            .expect("verifier")
            .with_tolerance(10);
        assert_eq!(verifier.verify(&header, body, 1_010), Ok(()));
        assert_eq!(
            verifier.verify(&header, body, 1_011),
            Err(VerifyError::TimestampOutsideTolerance {
                age_secs: 11,
                tolerance_secs: 10
            })
        );
    }

    #[test]
    fn uppercase_hex_is_not_accepted() {
        let body = b"{}";
        let header = sign(SECRET, 1_000, body);
        let (t, sig) = header.split_once(",v1=").expect("v1 item");
        let upper = format!("{t},v1={}", sig.to_uppercase());
        let verifier = StripeVerifier::new(vec![SECRET.into()]).expect("verifier");
        assert_eq!(
            verifier.verify(&upper, body, 1_000),
            Err(VerifyError::NoSignatureMatched)
        );
    }

    #[test]
    fn header_parsing() {
        assert_eq!(
            parse_header(" t=12 , v1=ab,junk,x=y,v0=cd,v1=ef "),
            Ok(ParsedHeader {
                timestamp: 12,
                signatures: vec!["ab", "ef"]
            })
        );
        assert_eq!(
            parse_header("   "),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            parse_header("t=abc,v1=ab"),
            Err(VerifyError::InvalidTimestamp(SIGNATURE_HEADER))
        );
        assert!(matches!(
            parse_header("t=1,t=2,v1=ab"),
            Err(VerifyError::MalformedHeader(reason)) if reason.contains("more than one")
        ));
        assert_eq!(parse_header("t=1"), Err(VerifyError::NoSupportedSignature));
    }

    #[test]
    fn constructor_rejects_missing_or_empty_secrets() {
        assert_eq!(
            StripeVerifier::new(vec![]).map(|_| ()),
            Err(VerifyError::NoSecrets)
        );
        assert!(matches!(
            StripeVerifier::new(vec![SECRET.into(), String::new()]),
            Err(VerifyError::InvalidSecret(_))
        ));
    }

    #[test]
    fn debug_is_redacted() {
        let verifier = StripeVerifier::new(vec![SECRET.into()]).expect("verifier");
        let shown = format!("{verifier:?}");
        assert!(!shown.contains("whsec"), "{shown}");
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

    use super::super::strategies::{body, clock_offset, config, fresh, timestamp};
    use super::*;

    /// `t=<t>,v1=<hex>` computed here with the `hmac` crate, independently of [`sign`].
    fn reference_header(secret: &str, t: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
    }

    /// Stripe secrets are used verbatim, so any non-empty string is one.
    fn secret() -> impl Strategy<Value = String> {
        prop_oneof!["whsec_[A-Za-z0-9]{8,40}", ".{1,40}"]
    }

    /// Header items that never match and never name `t`: stray `v1`s, other schemes, junk.
    fn extra_item() -> impl Strategy<Value = String> {
        prop_oneof![
            "v1=[0-9a-f]{0,64}",
            "v0=[0-9a-f]{64}",
            "x[a-z0-9]{0,3}=[ -+\\x2D-~]{0,10}",
            "[a-su-z ]{0,6}",
        ]
    }

    /// One way of damaging a correctly signed delivery.
    #[derive(Debug, Clone)]
    enum Mutation {
        /// The delivery as signed.
        Intact,
        /// Non-matching `v1=` entries and ignored items before and after the real one.
        ExtraItems(Vec<String>, Vec<String>),
        /// One bit (of the low seven, so it stays ASCII) flipped in one signature character.
        FlipSignatureBit(Index, u8),
        /// One bit flipped in one body byte (a byte added to an empty body).
        FlipBodyBit(Index, u8),
        /// The same signature under another claimed timestamp.
        OtherTimestamp(i64),
        /// Signed with a secret the verifier does not have.
        OtherSecret(String),
        /// The signature under another scheme name, so no `v1` is left.
        OtherScheme(&'static str),
        /// A second `t=` item.
        SecondTimestamp(i64),
        /// The header cut short.
        Truncated(Index),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let items = || prop::collection::vec(extra_item(), 0..4);
        prop_oneof![
            Just(Mutation::Intact),
            (items(), items()).prop_map(|(a, b)| Mutation::ExtraItems(a, b)),
            (any::<Index>(), 0..7_u8).prop_map(|(i, b)| Mutation::FlipSignatureBit(i, b)),
            (any::<Index>(), 0..8_u8).prop_map(|(i, b)| Mutation::FlipBodyBit(i, b)),
            timestamp().prop_map(Mutation::OtherTimestamp),
            secret().prop_map(Mutation::OtherSecret),
            prop::sample::select(vec!["v0", "v2", "V1", "v1 ", "v11", ""])
                .prop_map(Mutation::OtherScheme),
            timestamp().prop_map(Mutation::SecondTimestamp),
            any::<Index>().prop_map(Mutation::Truncated),
        ]
    }

    /// Applies `mutation` to the delivery `(header, body)` signed by `secret` at `t`, returning
    /// the damaged delivery and whether it is still correctly signed.
    fn apply(mutation: &Mutation, secret: &str, t: i64, body: Vec<u8>) -> (String, Vec<u8>, bool) {
        let header = sign(secret, t, &body);
        let signature = header
            .split_once(",v1=")
            .map(|(_, sig)| sig.to_owned())
            .expect("sign writes one v1");
        match mutation {
            Mutation::Intact => (header, body, true),
            Mutation::ExtraItems(before, after) => {
                let mut items = before.clone();
                items.push(format!(" t={t} "));
                items.push(format!("v1={signature}"));
                items.extend(after.iter().cloned());
                (items.join(","), body, true)
            }
            Mutation::FlipSignatureBit(index, bit) => {
                let mut bytes = signature.into_bytes();
                let i = index.index(bytes.len());
                bytes[i] ^= 1 << bit;
                let flipped = String::from_utf8(bytes).expect("still ASCII");
                (format!("t={t},v1={flipped}"), body, false)
            }
            Mutation::FlipBodyBit(index, bit) => {
                let mut body = body;
                if body.is_empty() {
                    body.push(1 << bit);
                } else {
                    let i = index.index(body.len());
                    body[i] ^= 1 << bit;
                }
                (header, body, false)
            }
            Mutation::OtherTimestamp(other) => {
                (format!("t={other},v1={signature}"), body, *other == t)
            }
            Mutation::OtherSecret(other) => (sign(other, t, &body), body, other == secret),
            Mutation::OtherScheme(scheme) => (format!("t={t},{scheme}={signature}"), body, false),
            Mutation::SecondTimestamp(other) => (format!("{header},t={other}"), body, false),
            Mutation::Truncated(index) => {
                let cut = index.index(header.len());
                (header[..cut].to_owned(), body, false)
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
            t in timestamp(),
            body in body(),
            offset in clock_offset(),
            tolerance in prop_oneof![Just(DEFAULT_TOLERANCE_SECS), -5..1000_i64],
        ) {
            let secret = which.get(&secrets);
            let header = sign(secret, t, &body);
            prop_assert_eq!(&header, &reference_header(secret, t, &body));
            let now = t.saturating_add(offset);
            let verifier = StripeVerifier::new(secrets.clone())
                .expect("non-empty secrets")
                .with_tolerance(tolerance);
            let got = verifier.verify(&header, &body, now);
            if fresh(t, now, tolerance) {
                prop_assert_eq!(got, Ok(()));
            } else {
                let is_stale = matches!(got, Err(VerifyError::TimestampOutsideTolerance { .. }));
                prop_assert!(is_stale, "{:?}", got);
            }
        }

        /// Damaging a fresh, correctly signed delivery (a flipped bit in its signature or body,
        /// another timestamp or secret, another scheme, a second `t=`, a cut) always gets it
        /// refused, while adding stray `v1=` entries and unknown items does not.
        #[test]
        fn damaged_deliveries_are_refused(
            secret in secret(),
            t in timestamp(),
            body in body(),
            offset in -DEFAULT_TOLERANCE_SECS..=DEFAULT_TOLERANCE_SECS,
            mutation in mutation(),
        ) {
            let now = t.saturating_add(offset);
            let (header, body, still_signed) = apply(&mutation, &secret, t, body);
            let verifier = StripeVerifier::new(vec![secret.clone()]).expect("secret");
            let got = verifier.verify(&header, &body, now);
            if still_signed && fresh(t, now, DEFAULT_TOLERANCE_SECS) {
                prop_assert_eq!(&got, &Ok(()), "header {:?}", header);
            } else {
                prop_assert!(got.is_err(), "accepted {:?}", header);
            }
            if matches!(mutation, Mutation::FlipSignatureBit(..) | Mutation::FlipBodyBit(..)) {
                prop_assert_eq!(got, Err(VerifyError::NoSignatureMatched));
            }
        }

        /// Arbitrary header text (anything at all, or `t=`/`v1=`-shaped items), with any body and
        /// any clock, never panics and is never accepted.
        #[test]
        fn arbitrary_headers_are_refused_without_panicking(
            header in prop_oneof![
                any::<String>(),
                prop::collection::vec(
                    prop_oneof!["t=[0-9]{0,20}", "v1=[0-9a-f]{0,64}", "[ -~]{0,8}"],
                    0..6,
                ).prop_map(|items| items.join(",")),
            ],
            body in body(),
            now in any::<i64>(),
        ) {
            let verifier = StripeVerifier::new(vec!["whsec_fuzz".into()]).expect("secret");
            prop_assert!(verifier.verify(&header, &body, now).is_err());
        }
    }
}
