//! The HTTP job endpoints given at start (`--endpoint`, `FLARE_ENDPOINT_SECRET`) and the addresses
//! they may have (`--endpoint-allow`), checked into `EndpointSeed`s or one clear error.

use super::error::Error;
use crate::endpoints::EndpointSeed;

/// The longest endpoint URL accepted, in bytes.
pub const MAX_ENDPOINT_URL_BYTES: usize = crate::endpoints::MAX_URL_LEN;

/// Reads `--endpoint-allow`/`FLARE_ENDPOINT_ALLOW` (see [`crate::endpoints::address`]).
pub(super) fn endpoint_allow(
    entries: &[String],
) -> Result<crate::endpoints::address::AllowList, Error> {
    crate::endpoints::address::AllowList::parse(entries).map_err(|reason| Error::Value {
        name: "--endpoint-allow/FLARE_ENDPOINT_ALLOW",
        reason,
    })
}

/// Checks the endpoint URLs given at start (with the rules of [`crate::endpoints::validate_url`],
/// under `allow`) and pairs each with `secret`.
pub(super) fn endpoint_seeds(
    urls: Vec<String>,
    secret: Option<String>,
    allow: &crate::endpoints::address::AllowList,
) -> Result<Vec<EndpointSeed>, Error> {
    let mut seeds: Vec<EndpointSeed> = Vec::with_capacity(urls.len());
    for raw in &urls {
        let url = crate::endpoints::validate_url(raw, allow).map_err(|e| Error::Endpoint {
            url: crate::endpoints::shown_url(raw.trim()),
            reason: match e {
                crate::endpoints::Error::Url { reason, .. } => reason,
                other => other.to_string(),
            },
        })?;
        if seeds.iter().any(|s| s.url == url) {
            return Err(Error::Endpoint {
                url: crate::endpoints::shown_url(raw.trim()),
                reason: "given twice".into(),
            });
        }
        seeds.push(EndpointSeed {
            url,
            secret: String::new(),
        });
    }
    if seeds.is_empty() {
        return Ok(seeds);
    }
    let secret = secret
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or(Error::MissingEndpointSecret)?;
    // The reason alone: "invalid FLARE_ENDPOINT_SECRET: invalid endpoint secret: …" said it twice.
    crate::endpoints::validate_secret(&secret).map_err(|e| {
        Error::EndpointSecret(match e {
            crate::endpoints::Error::Secret(reason) => reason,
            other => other.to_string(),
        })
    })?;
    for seed in &mut seeds {
        seed.secret.clone_from(&secret);
    }
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{raw, ENDPOINT_SECRET};
    use super::super::*;

    fn with_endpoints(urls: &[&str], secret: Option<&str>) -> Result<ServeConfig, Error> {
        RawServe {
            endpoints: urls.iter().map(|u| u.to_string()).collect(),
            endpoint_secret: secret.map(str::to_string),
            ..raw("127.0.0.1:1")
        }
        .validate()
    }

    #[test]
    fn endpoints_are_http_urls_with_a_host_paired_with_the_secret() {
        let c = with_endpoints(
            &["http://127.0.0.1:4000/flare", " HTTPS://Jobs.Example.com "],
            Some(ENDPOINT_SECRET),
        )
        .expect("valid");
        let urls: Vec<&str> = c.endpoints.iter().map(|e| e.url.as_str()).collect();
        assert_eq!(
            urls,
            ["http://127.0.0.1:4000/flare", "https://jobs.example.com/"]
        );
        assert!(c.endpoints.iter().all(|e| e.secret == ENDPOINT_SECRET));
        assert!(with_endpoints(&[], None)
            .expect("no endpoint, no secret needed")
            .endpoints
            .is_empty());
        let worker = RawWorker {
            database_url: "sqlite://x.db".into(),
            concurrency: 1,
            lease_secs: 1,
            endpoints: vec!["http://localhost:4000/flare".into()],
            endpoint_secret: Some(ENDPOINT_SECRET.into()),
            ..RawWorker::default()
        }
        .validate()
        .expect("valid worker");
        assert_eq!(worker.endpoints[0].url, "http://localhost:4000/flare");
    }

    #[test]
    fn bad_endpoint_urls_are_refused_with_the_flag_and_the_reason() {
        let long = format!("http://example.com/{}", "a".repeat(2000));
        for (url, reason) in [
            ("example.com/flare", "not a URL"),
            ("", "not a URL"),
            ("ftp://example.com/flare", "http or https"),
            ("file:///etc/passwd", "http or https"),
            (
                "http://ops:hunter2@example.com/flare",
                "user name or password",
            ),
            (long.as_str(), "longer than 2000 bytes"),
        ] {
            let err = with_endpoints(&[url], Some(ENDPOINT_SECRET)).unwrap_err();
            let shown = err.to_string();
            assert!(shown.contains("--endpoint/FLARE_ENDPOINTS"), "{shown}");
            assert!(shown.contains(reason), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.len() < 300, "{shown}");
        }
        let err = with_endpoints(
            &["http://example.com/flare", "http://EXAMPLE.com/flare"],
            Some(ENDPOINT_SECRET),
        )
        .unwrap_err();
        assert!(err.to_string().contains("given twice"), "{err}");
        let worker = RawWorker {
            database_url: "sqlite://x.db".into(),
            concurrency: 1,
            lease_secs: 1,
            endpoints: vec!["nope".into()],
            endpoint_secret: Some(ENDPOINT_SECRET.into()),
            ..RawWorker::default()
        }
        .validate()
        .unwrap_err();
        assert!(matches!(worker, Error::Endpoint { .. }), "{worker}");
    }

    #[test]
    fn endpoints_at_link_local_metadata_or_unspecified_addresses_need_the_allow_flag() {
        for (url, reason) in [
            ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
            ("http://metadata.google.internal/", "cloud metadata"),
            ("http://[fe80::1]:4000/flare", "link-local"),
            ("http://0.0.0.0:4000/flare", "unspecified"),
        ] {
            let shown = with_endpoints(&[url], Some(ENDPOINT_SECRET))
                .unwrap_err()
                .to_string();
            assert!(shown.contains("--endpoint/FLARE_ENDPOINTS"), "{shown}");
            assert!(shown.contains(reason), "{url}: {shown}");
            assert!(shown.contains("--endpoint-allow"), "{shown}");
        }
        let allowed = |urls: &[&str], allow: &[&str]| {
            RawServe {
                endpoints: urls.iter().map(|u| u.to_string()).collect(),
                endpoint_secret: Some(ENDPOINT_SECRET.into()),
                endpoint_allow: allow.iter().map(|a| a.to_string()).collect(),
                ..raw("127.0.0.1:1")
            }
            .validate()
        };
        let c = allowed(
            &[
                "http://169.254.169.254/flare",
                "http://metadata.google.internal/",
            ],
            &["169.254.169.254", "metadata.google.internal"],
        )
        .expect("allowed");
        assert_eq!(c.endpoints.len(), 2);
        assert!(allowed(&["http://[fe80::1]/"], &["fe80::/10"]).is_ok());
        // Private networks, where applications live, need no flag.
        let c = with_endpoints(
            &["http://10.1.2.3:4000/flare", "http://192.168.1.5/flare"],
            Some(ENDPOINT_SECRET),
        )
        .expect("private addresses");
        assert_eq!(c.endpoints.len(), 2);
        let err = allowed(&[], &["10.0.0.0/99"]).unwrap_err().to_string();
        assert!(
            err.contains("--endpoint-allow/FLARE_ENDPOINT_ALLOW"),
            "{err}"
        );
        let worker = |allow: &str| RawWorker {
            database_url: "sqlite://x.db".into(),
            concurrency: 1,
            lease_secs: 1,
            endpoints: vec!["http://169.254.169.254/".into()],
            endpoint_secret: Some(ENDPOINT_SECRET.into()),
            endpoint_allow: vec![allow.into()],
            ..RawWorker::default()
        };
        assert!(worker("").validate().is_err());
        assert!(worker("169.254.0.0/16").validate().is_ok());
    }

    #[test]
    fn endpoints_need_a_standard_webhooks_secret_that_is_never_shown() {
        let url = "http://127.0.0.1:4000/flare";
        for secret in [None, Some(""), Some("  ")] {
            assert!(
                matches!(
                    with_endpoints(&[url], secret),
                    Err(Error::MissingEndpointSecret)
                ),
                "{secret:?}"
            );
        }
        assert!(Error::MissingEndpointSecret
            .to_string()
            .contains("FLARE_ENDPOINT_SECRET"));
        for secret in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_not!base64!at-all",
            "whsec_",
        ] {
            let shown = with_endpoints(&[url], Some(secret))
                .unwrap_err()
                .to_string();
            assert!(shown.contains("FLARE_ENDPOINT_SECRET"), "{shown}");
            assert!(
                !shown.contains("invalid endpoint secret"),
                "said once: {shown}"
            );
            assert!(
                !shown.contains("MfKQ9r8") && !shown.contains("not!base64"),
                "{shown}"
            );
        }
        let c = with_endpoints(&[url], Some(ENDPOINT_SECRET)).expect("valid");
        let shown = format!("{c:?} {:?}", c.endpoints[0]);
        assert!(shown.contains(url), "{shown}");
        assert!(!shown.contains("MfKQ9r8"), "{shown}");
    }
}
