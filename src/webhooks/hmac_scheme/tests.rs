use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;
use crate::webhooks::strategies::{body, clock_offset, config, fresh, timestamp};

fn lookup(map: &HashMap<String, String>) -> impl Fn(&str) -> Option<String> + '_ {
    |name| map.get(name).cloned()
}

/// GitHub's published example: the secret "It's a Secret to Everybody" and the payload
/// "Hello, World!" give this signature (docs.github.com, "Validating webhook deliveries").
#[test]
fn github_documented_example() {
    let scheme = HmacScheme::github();
    let body = b"Hello, World!";
    let signed = scheme
        .sign("It's a Secret to Everybody", body, &|_| None)
        .expect("sign");
    assert_eq!(
        signed,
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
    let verifier =
        HmacVerifier::new(scheme, &["It's a Secret to Everybody".into()], 300).expect("v");
    let headers = HashMap::from([("x-hub-signature-256".to_string(), signed)]);
    assert_eq!(verifier.verify(&lookup(&headers), body, 0), Ok(()));
}

/// Slack's documented example ("Verifying requests from Slack"): secret, timestamp and body give
/// this `v0=` signature.
#[test]
fn slack_documented_example() {
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let headers = HashMap::from([(
        "x-slack-request-timestamp".to_string(),
        "1531420618".to_string(),
    )]);
    let signed = HmacScheme::slack()
        .sign(secret, body, &lookup(&headers))
        .expect("sign");
    assert_eq!(
        signed,
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    );
}

#[test]
fn signed_content_templates() {
    let parsed = SignedContent::parse("{timestamp}.{body}").expect("parse");
    assert!(parsed.has_timestamp());
    assert_eq!(parsed.template(), "{timestamp}.{body}");
    for bad in [
        "{timestamp}",
        "{body}{body}",
        "{body}{nope}",
        "{body",
        "a}{body}",
    ] {
        assert!(SignedContent::parse(bad).is_err(), "{bad}");
    }
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(vec![Algorithm::Sha1, Algorithm::Sha256, Algorithm::Sha512])
}

fn encoding() -> impl Strategy<Value = Encoding> {
    prop::sample::select(vec![Encoding::Hex, Encoding::Base64])
}

fn secret() -> impl Strategy<Value = String> {
    "[ -~]{1,40}"
}

fn scheme() -> impl Strategy<Value = HmacScheme> {
    (
        algorithm(),
        encoding(),
        prop::sample::select(vec!["", "sha256=", "v0=", "v1,"]),
        any::<bool>(),
    )
        .prop_map(|(algorithm, encoding, prefix, stamped)| HmacScheme {
            algorithm,
            header: "x-signature".into(),
            encoding,
            // "v1," would split on the comma: use it only as a literal in the signed content.
            prefix: if prefix == "v1," {
                String::new()
            } else {
                prefix.into()
            },
            signed: if stamped {
                SignedContent(vec![
                    Signed::Literal(prefix.into()),
                    Signed::Timestamp,
                    Signed::Literal(".".into()),
                    Signed::Body,
                ])
            } else {
                SignedContent::body()
            },
            timestamp_header: stamped.then(|| "x-timestamp".into()),
        })
}

/// The signature computed here, without the scheme's code: the signed bytes spelled out.
fn reference(scheme: &HmacScheme, secret: &str, t: i64, body: &[u8]) -> String {
    let mut message = Vec::new();
    for part in &scheme.signed.0 {
        match part {
            Signed::Literal(l) => message.extend_from_slice(l.as_bytes()),
            Signed::Timestamp => message.extend_from_slice(t.to_string().as_bytes()),
            Signed::Body => message.extend_from_slice(body),
            Signed::Header(_) => unreachable!("not generated"),
        }
    }
    let mac = match scheme.algorithm {
        Algorithm::Sha1 => {
            let mut m = <Hmac<sha1::Sha1> as Mac>::new_from_slice(secret.as_bytes()).expect("key");
            m.update(&message);
            m.finalize().into_bytes().to_vec()
        }
        Algorithm::Sha256 => crate::webhooks::hmac_sha256(secret.as_bytes(), &[&message]).to_vec(),
        Algorithm::Sha512 => {
            let mut m =
                <Hmac<sha2::Sha512> as Mac>::new_from_slice(secret.as_bytes()).expect("key");
            m.update(&message);
            m.finalize().into_bytes().to_vec()
        }
    };
    format!("{}{}", scheme.prefix, scheme.encoding.encode(&mac))
}

fn headers_for(scheme: &HmacScheme, signature: String, t: i64) -> HashMap<String, String> {
    let mut map = HashMap::from([(scheme.header.clone(), signature)]);
    if let Some(h) = &scheme.timestamp_header {
        map.insert(h.clone(), t.to_string());
    }
    map
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipSignatureBit(Index, u8),
    FlipBodyBit(Index, u8),
    OtherSecret(String),
    OtherTimestamp(i64),
    NoPrefix,
    Truncated(Index),
    Missing,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 0..7_u8).prop_map(|(i, b)| Mutation::FlipSignatureBit(i, b)),
        (any::<Index>(), 0..8_u8).prop_map(|(i, b)| Mutation::FlipBodyBit(i, b)),
        secret().prop_map(Mutation::OtherSecret),
        timestamp().prop_map(Mutation::OtherTimestamp),
        Just(Mutation::NoPrefix),
        any::<Index>().prop_map(Mutation::Truncated),
        Just(Mutation::Missing),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// A delivery signed with any configured secret is accepted exactly when its timestamp (if
    /// the scheme signs one) is within the tolerance, and `sign` agrees with a signature
    /// computed independently.
    #[test]
    fn signed_deliveries_are_accepted_exactly_when_fresh(
        scheme in scheme(),
        secrets in prop::collection::vec(secret(), 1..4),
        which in any::<Index>(),
        t in timestamp(),
        body in body(),
        offset in clock_offset(),
        tolerance in prop_oneof![Just(300_i64), 0..1000_i64],
    ) {
        let secret = which.get(&secrets);
        let stamp = HashMap::from([("x-timestamp".to_string(), t.to_string())]);
        let signature = scheme.sign(secret, &body, &lookup(&stamp)).expect("sign");
        prop_assert_eq!(&signature, &reference(&scheme, secret, t, &body));
        let headers = headers_for(&scheme, signature, t);
        let verifier = HmacVerifier::new(scheme.clone(), &secrets, tolerance).expect("verifier");
        let now = t.saturating_add(offset);
        let got = verifier.verify(&lookup(&headers), &body, now);
        if scheme.timestamp_header.is_none() || fresh(t, now, tolerance) {
            prop_assert_eq!(got, Ok(()));
        } else {
            let stale = matches!(got, Err(VerifyError::TimestampOutsideTolerance { .. }));
            prop_assert!(stale, "{:?}", got);
        }
    }

    /// Damaging a fresh, correctly signed delivery (a bit of its signature or body, another
    /// secret or timestamp, the prefix dropped, a cut, the header removed) gets it refused.
    #[test]
    fn damaged_deliveries_are_refused(
        scheme in scheme(),
        secret in secret(),
        t in 1_500_000_000..2_000_000_000_i64,
        body in body(),
        mutation in mutation(),
    ) {
        let stamp = HashMap::from([("x-timestamp".to_string(), t.to_string())]);
        let signature = scheme.sign(&secret, &body, &lookup(&stamp)).expect("sign");
        let verifier = HmacVerifier::new(scheme.clone(), std::slice::from_ref(&secret), 300).expect("v");
        let encoded = signature[scheme.prefix.len()..].to_string();
        let (headers, body, still_valid) = match &mutation {
            Mutation::FlipSignatureBit(index, bit) => {
                let mut bytes = encoded.clone().into_bytes();
                let i = index.index(bytes.len());
                bytes[i] ^= 1 << bit;
                let flipped = String::from_utf8(bytes).expect("ASCII");
                // Flipping hex case (bit 5 of a letter) keeps the same bytes.
                let same = scheme.encoding == Encoding::Hex && flipped.eq_ignore_ascii_case(&encoded);
                (headers_for(&scheme, format!("{}{flipped}", scheme.prefix), t), body, same)
            }
            Mutation::FlipBodyBit(index, bit) => {
                let mut body = body;
                if body.is_empty() {
                    body.push(1 << bit);
                } else {
                    let i = index.index(body.len());
                    body[i] ^= 1 << bit;
                }
                (headers_for(&scheme, signature.clone(), t), body, false)
            }
            Mutation::OtherSecret(other) => {
                let sig = scheme.sign(other, &body, &lookup(&stamp)).expect("sign");
                (headers_for(&scheme, sig, t), body, *other == secret)
            }
            Mutation::OtherTimestamp(other) => {
                // Unsigned time is not looked at; a signed one changed breaks the signature.
                let still = scheme.timestamp_header.is_none() || *other == t;
                let mut headers = headers_for(&scheme, signature.clone(), t);
                if let Some(h) = &scheme.timestamp_header {
                    headers.insert(h.clone(), other.to_string());
                }
                (headers, body, still)
            }
            Mutation::NoPrefix => (headers_for(&scheme, encoded.clone(), t), body, scheme.prefix.is_empty()),
            Mutation::Truncated(index) => {
                let cut = index.index(signature.len());
                (headers_for(&scheme, signature[..cut].to_string(), t), body, false)
            }
            Mutation::Missing => {
                let mut headers = headers_for(&scheme, signature.clone(), t);
                headers.remove(&scheme.header);
                (headers, body, false)
            }
        };
        let got = verifier.verify(&lookup(&headers), &body, t);
        if still_valid {
            prop_assert_eq!(got, Ok(()));
        } else {
            prop_assert!(got.is_err(), "{:?} accepted", mutation);
        }
    }
}
