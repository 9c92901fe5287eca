//! An endpoint as an operator gives it ([`EndpointSeed`]: at start with `--endpoint`, or through
//! the API and the dashboard): its URL and secret checked ([`validate_url`], [`validate_secret`]),
//! a fresh secret ([`generate_secret`]), and the endpoint's id derived from its URL.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::address;
use super::error::Error;

/// Longest URL accepted.
pub const MAX_URL_LEN: usize = 2000;

/// `ep_` and 16 hex digits of the URL's SHA-256: the same URL gets the same id on every node and
/// at every start.
pub fn endpoint_id(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    format!("ep_{}", &hex::encode(digest)[..16])
}

/// Checks an endpoint URL: http or https, a host, no credentials, at most [`MAX_URL_LEN`] bytes,
/// and an address `allow` lets through ([`address`]). Returns it normalised (as the URL parser
/// writes it).
pub fn validate_url(url: &str, allow: &address::AllowList) -> Result<String, Error> {
    let bad = |reason: &str| Error::Url {
        url: shown_url(url.trim()),
        reason: reason.to_string(),
    };
    if url.len() > MAX_URL_LEN {
        return Err(bad("longer than 2000 bytes"));
    }
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "a user name or password in the URL is not allowed: Flare signs its calls with the endpoint's secret",
        ));
    }
    if parsed.fragment().is_some() {
        return Err(bad("remove the #fragment"));
    }
    allow.check_url(&parsed).map_err(|r| bad(&r.to_string()))?;
    Ok(parsed.to_string())
}

/// `raw` as it may be shown in an error: credentials replaced by `…`, at most 100 characters.
pub fn shown_url(raw: &str) -> String {
    let mut shown = raw.to_string();
    if let Some(start) = raw.find("://").map(|i| i + 3) {
        let authority_end = raw[start..]
            .find(['/', '?', '#'])
            .map_or(raw.len(), |i| start + i);
        if let Some(at) = raw[start..authority_end].rfind('@') {
            shown = format!("{}…@{}", &raw[..start], &raw[start + at + 1..]);
        }
    }
    if shown.chars().count() > 100 {
        shown = shown.chars().take(99).chain(['…']).collect();
    }
    shown
}

/// Checks a Standard Webhooks secret (`whsec_` and base64); the error never shows it.
pub fn validate_secret(secret: &str) -> Result<(), Error> {
    if !secret.starts_with(crate::webhooks::svix::SECRET_PREFIX) {
        return Err(Error::Secret(
            "it must look like whsec_<base64>, as Standard Webhooks secrets do".into(),
        ));
    }
    crate::webhooks::svix::sign(secret, "msg_check", 0, b"")
        .map(|_| ())
        .map_err(|e| Error::Secret(e.to_string()))
}

/// A new random secret: `whsec_` and 32 random bytes in base64.
pub fn generate_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "{}{}",
        crate::webhooks::svix::SECRET_PREFIX,
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// An HTTP job endpoint given at start: the URL Flare calls and the Standard Webhooks secret it
/// signs the calls with. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointSeed {
    /// An `http` or `https` URL with a host and no credentials, as the `url` crate normalizes it
    /// (lowercase scheme and host, `/` for an empty path).
    pub url: String,
    /// `whsec_<base64>` (`FLARE_ENDPOINT_SECRET`).
    pub secret: String,
}

impl std::fmt::Debug for EndpointSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointSeed")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let check = |url: &str| validate_url(url, &address::AllowList::default());
        assert_eq!(
            check("http://127.0.0.1:4000/flare").ok().as_deref(),
            Some("http://127.0.0.1:4000/flare")
        );
        assert!(check("https://jobs.example.com/api/flare?x=1").is_ok());
        for (bad, why) in [
            ("ftp://x/y", "http"),
            ("not a url", "invalid endpoint URL"),
            ("http://user:hunter2@x/", "user name or password"),
            ("http://x/#frag", "fragment"),
            ("file:///etc/passwd", "http"),
            ("http://169.254.169.254/latest", "cloud metadata service"),
            ("http://[fe80::1]:4000/", "link-local"),
            ("http://0.0.0.0:4000/", "unspecified"),
        ] {
            let err = check(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "a password is never shown: {err}");
        }
        assert!(check(&format!("http://x/{}", "a".repeat(MAX_URL_LEN))).is_err());
    }

    #[test]
    fn ids_are_stable_and_secrets_valid() {
        assert_eq!(endpoint_id("http://a/"), endpoint_id("http://a/"));
        assert_ne!(endpoint_id("http://a/"), endpoint_id("http://b/"));
        assert!(endpoint_id("http://a/").starts_with("ep_"));
        let s = generate_secret();
        assert!(validate_secret(&s).is_ok());
        assert_ne!(s, generate_secret());
        let err = validate_secret("whsec_!!notbase64")
            .expect_err("bad")
            .to_string();
        assert!(!err.contains("!!notbase64"), "{err}");
        assert!(validate_secret("plain-secret").is_err());
    }
}
