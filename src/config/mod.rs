//! Validated configuration of `flare serve` and `flare worker`: raw flags and environment become
//! a [`ServeConfig`] or a [`WorkerConfig`], or one clear [`Error`].
//!
//! Both carry the HTTP job endpoints given at start ([`EndpointSeed`]: `--endpoint` or
//! `FLARE_ENDPOINTS`, signed with `FLARE_ENDPOINT_SECRET`), the addresses endpoints may have
//! besides the default (`--endpoint-allow`/`FLARE_ENDPOINT_ALLOW`, see
//! [`crate::endpoints::address`]) and whether the seed's demo jobs run (`demo`; the command line
//! decides its default, see `crate::app`).
//!
//! Only the app reads flags and environment; the layers below get typed settings built here
//! (`EngineConfig`, `crate::http::HttpConfig`, `EndpointSeed`s).

mod endpoints;
mod error;
mod limits;
mod webhook_sources;

use std::net::SocketAddr;

use endpoints::{endpoint_allow, endpoint_seeds};
pub use error::Error;
use limits::{connection_limits, engine_config, RawLimits};

pub use crate::endpoints::EndpointSeed;
use crate::engine::EngineConfig;
pub use endpoints::MAX_ENDPOINT_URL_BYTES;

/// Everything `flare serve` needs.
#[derive(Clone)]
pub struct ServeConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// `sqlite://…` URL.
    pub database_url: String,
    /// Bearer key protecting the API and dashboard.
    pub api_key: Option<String>,
    /// Stripe signing secrets (rotation: several).
    pub stripe_secrets: Vec<String>,
    /// Clerk/Svix signing secrets.
    pub clerk_secrets: Vec<String>,
    /// Largest request body accepted, in bytes (webhooks, `/trigger`, …).
    pub body_limit: usize,
    /// Connections at once, and the time a client gets for a request's headers and body.
    pub limits: crate::http::connections::Limits,
    /// Engine settings.
    pub engine: EngineConfig,
    /// Whether the seed's demo jobs ([`crate::reference_jobs`]) are defined.
    pub demo: bool,
    /// HTTP job endpoints given at start.
    pub endpoints: Vec<EndpointSeed>,
    /// Reverse proxies whose `X-Forwarded-For` names the client (`--trusted-proxy`); none by
    /// default ([`crate::http::client_ip`]).
    pub trusted_proxies: crate::http::client_ip::TrustedProxies,
    /// Link-local, metadata or unspecified addresses and names endpoints may have all the same.
    pub endpoint_allow: crate::endpoints::address::AllowList,
    /// Webhook sources from the file given at start.
    pub webhook_sources: Vec<crate::webhooks::source::Source>,
    /// Every job is paused at start (`--paused`), before any run is claimed.
    pub paused: bool,
    /// `FLARE_METRICS_TOKEN`: reads `GET /metrics` only.
    pub metrics_token: Option<String>,
}

impl From<&ServeConfig> for crate::http::HttpConfig {
    fn from(c: &ServeConfig) -> Self {
        Self {
            api_key: c.api_key.clone(),
            body_limit: c.body_limit,
            trusted_proxies: c.trusted_proxies.clone(),
            database_url: c.database_url.clone(),
            stripe_secrets: c.stripe_secrets.clone(),
            clerk_secrets: c.clerk_secrets.clone(),
            endpoint_allow: c.endpoint_allow.clone(),
            webhook_sources: c.webhook_sources.clone(),
            metrics_token: c.metrics_token.clone(),
        }
    }
}

impl From<ServeConfig> for crate::http::HttpConfig {
    fn from(c: ServeConfig) -> Self {
        Self::from(&c)
    }
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("listen", &self.listen)
            .field(
                "database_url",
                &crate::store::postgres::redact(&self.database_url),
            )
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field(
                "metrics_token",
                &self.metrics_token.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "stripe_secrets",
                &format_args!("<{} redacted>", self.stripe_secrets.len()),
            )
            .field(
                "clerk_secrets",
                &format_args!("<{} redacted>", self.clerk_secrets.len()),
            )
            .field("body_limit", &self.body_limit)
            .field("limits", &self.limits)
            .field("engine", &self.engine)
            .field("paused", &self.paused)
            .field("demo", &self.demo)
            .field("endpoints", &self.endpoints)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("endpoint_allow", &self.endpoint_allow)
            .finish()
    }
}

/// Raw settings as given on the command line or in the environment.
#[derive(Debug, Clone, Default)]
pub struct RawServe {
    /// `--listen`.
    pub listen: String,
    /// `--database-url`.
    pub database_url: String,
    /// `FLARE_API_KEY`.
    pub api_key: Option<String>,
    /// `STRIPE_WEBHOOK_SECRET`, comma-separated.
    pub stripe_secrets: Option<String>,
    /// `CLERK_WEBHOOK_SECRET`, comma-separated.
    pub clerk_secrets: Option<String>,
    /// `--concurrency`.
    pub concurrency: usize,
    /// `--retention-days` (0 keeps everything).
    pub retention_days: u64,
    /// `--lease-secs`.
    pub lease_secs: u64,
    /// `--shutdown-grace-secs`.
    pub shutdown_grace_secs: u64,
    /// `--max-body-bytes`; `None` means [`crate::http::body::DEFAULT_BODY_LIMIT`] (1 MiB).
    pub max_body_bytes: Option<usize>,
    /// `--max-connections`; `None` means [`crate::http::connections::DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: Option<usize>,
    /// `--max-connections-per-ip`; `None` means a quarter of the connections.
    pub max_connections_per_ip: Option<usize>,
    /// `--first-byte-timeout-secs`; `None` means the default (3 s).
    pub first_byte_timeout_secs: Option<u64>,
    /// `--header-timeout-secs`; `None` means the default (10 s).
    pub header_timeout_secs: Option<u64>,
    /// `--body-timeout-secs`; `None` means the default (30 s).
    pub body_timeout_secs: Option<u64>,
    /// `--demo`/`FLARE_DEMO`: define the seed's demo jobs.
    pub demo: bool,
    /// `--endpoint` (each one) or `FLARE_ENDPOINTS` (split on commas).
    pub endpoints: Vec<String>,
    /// `FLARE_ENDPOINT_SECRET`.
    pub endpoint_secret: Option<String>,
    /// `--trusted-proxy` (each one) or `FLARE_TRUSTED_PROXIES` (split on commas).
    pub trusted_proxies: Vec<String>,
    /// `--endpoint-allow` (each one) or `FLARE_ENDPOINT_ALLOW` (split on commas).
    pub endpoint_allow: Vec<String>,
    /// `--webhook-sources`/`FLARE_WEBHOOK_SOURCES`: a JSON file of webhook sources.
    pub webhook_sources: Option<String>,
    /// `--node-name`/`FLARE_NODE_NAME`; `None`: the host name and process id.
    pub node_name: Option<String>,
    /// `--paused`: pause every job at start (opening a copy of a database).
    pub paused: bool,
    /// `FLARE_METRICS_TOKEN`.
    pub metrics_token: Option<String>,
}

/// `--node-name`: 1 to 100 letters, digits, `.`, `_`, `-` or `:`; empty means unset.
fn node_name(raw: Option<String>) -> Result<Option<String>, Error> {
    let Some(name) = raw.map(|n| n.trim().to_string()).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let fine = name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if !fine {
        return Err(Error::Value {
            name: "--node-name/FLARE_NODE_NAME",
            reason: format!(
                "{:?}: use 1 to 100 letters, digits, '.', '_', '-' or ':'",
                name.chars().take(100).collect::<String>()
            ),
        });
    }
    Ok(Some(name))
}

fn secrets(raw: Option<String>) -> Vec<String> {
    raw.map(|s| {
        s.split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// `FLARE_API_KEY` as given, trimmed like the webhook secrets (a key read from a file often ends
/// with a newline, which would make every request 401). Empty means unset; only whitespace is
/// refused.
fn api_key(raw: Option<String>) -> Result<Option<String>, Error> {
    match raw {
        Some(k) if k.is_empty() => Ok(None),
        Some(k) if k.trim().is_empty() => Err(Error::BlankKey),
        Some(k) => Ok(Some(k.trim().to_string())),
        None => Ok(None),
    }
}

/// `FLARE_METRICS_TOKEN`, trimmed like the API key; empty means unset; at least 16 characters.
fn metrics_token(raw: Option<String>) -> Result<Option<String>, Error> {
    let Some(token) = raw.map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if token.len() < 16 {
        return Err(Error::Value {
            name: "FLARE_METRICS_TOKEN",
            reason: "must be at least 16 characters (generate it: openssl rand -hex 32)".into(),
        });
    }
    Ok(Some(token))
}

impl RawServe {
    /// Validates the settings.
    pub fn validate(self) -> Result<ServeConfig, Error> {
        let listen: SocketAddr = self
            .listen
            .parse()
            .map_err(|_| Error::Listen(self.listen.clone()))?;
        let api_key = api_key(self.api_key)?;
        let metrics_token = metrics_token(self.metrics_token)?;
        match &api_key {
            Some(k) if k.len() < 16 => return Err(Error::WeakKey),
            None if !listen.ip().is_loopback() => return Err(Error::Unprotected(listen)),
            _ => {}
        }
        let mut engine = engine_config(
            self.concurrency,
            self.lease_secs,
            self.retention_days,
            self.shutdown_grace_secs,
        )?;
        engine.node_name = node_name(self.node_name)?;
        let body_limit = self
            .max_body_bytes
            .unwrap_or(crate::http::body::DEFAULT_BODY_LIMIT);
        if body_limit == 0 {
            return Err(Error::Value {
                name: "--max-body-bytes",
                reason: "must be at least 1".into(),
            });
        }
        let limits = connection_limits(RawLimits {
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            first_byte_timeout_secs: self.first_byte_timeout_secs,
            header_timeout_secs: self.header_timeout_secs,
            body_timeout_secs: self.body_timeout_secs,
        })?;
        let stripe_secrets = secrets(self.stripe_secrets);
        let clerk_secrets = secrets(self.clerk_secrets);
        if !stripe_secrets.is_empty() {
            crate::webhooks::stripe::StripeVerifier::new(stripe_secrets.clone()).map_err(
                |reason| Error::WebhookSecret {
                    name: "STRIPE_WEBHOOK_SECRET",
                    reason,
                },
            )?;
        }
        if !clerk_secrets.is_empty() {
            crate::webhooks::svix::SvixVerifier::new(clerk_secrets.clone()).map_err(|reason| {
                Error::WebhookSecret {
                    name: "CLERK_WEBHOOK_SECRET",
                    reason,
                }
            })?;
        }
        let webhook_sources = match &self.webhook_sources {
            Some(path) if !path.is_empty() => {
                webhook_sources::read(path, |name| std::env::var(name).ok())?
            }
            _ => Vec::new(),
        };
        let endpoint_allow = endpoint_allow(&self.endpoint_allow)?;
        let endpoints = endpoint_seeds(self.endpoints, self.endpoint_secret, &endpoint_allow)?;
        let trusted_proxies = crate::http::client_ip::TrustedProxies::parse(&self.trusted_proxies)
            .map_err(|reason| Error::Value {
                name: "--trusted-proxy/FLARE_TRUSTED_PROXIES",
                reason,
            })?;
        Ok(ServeConfig {
            listen,
            database_url: self.database_url,
            api_key,
            stripe_secrets,
            clerk_secrets,
            body_limit,
            limits,
            engine,
            demo: self.demo,
            endpoints,
            trusted_proxies,
            endpoint_allow,
            webhook_sources,
            paused: self.paused,
            metrics_token,
        })
    }
}

/// Everything `flare worker` needs: where the data is and how the engine runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Database URL.
    pub database_url: String,
    /// Engine settings.
    pub engine: EngineConfig,
    /// Whether the seed's demo jobs ([`crate::reference_jobs`]) are defined.
    pub demo: bool,
    /// HTTP job endpoints given at start.
    pub endpoints: Vec<EndpointSeed>,
    /// Link-local, metadata or unspecified addresses and names endpoints may have all the same.
    pub endpoint_allow: crate::endpoints::address::AllowList,
    /// Every job is paused at start (`--paused`).
    pub paused: bool,
}

/// Raw settings of `flare worker`, as given on the command line or in the environment.
#[derive(Debug, Clone, Default)]
pub struct RawWorker {
    /// `--database-url`.
    pub database_url: String,
    /// `--concurrency`.
    pub concurrency: usize,
    /// `--retention-days` (0 keeps everything).
    pub retention_days: u64,
    /// `--lease-secs`.
    pub lease_secs: u64,
    /// `--shutdown-grace-secs`.
    pub shutdown_grace_secs: u64,
    /// `--demo`/`FLARE_DEMO`: define the seed's demo jobs.
    pub demo: bool,
    /// `--endpoint` (each one) or `FLARE_ENDPOINTS` (split on commas).
    pub endpoints: Vec<String>,
    /// `FLARE_ENDPOINT_SECRET`.
    pub endpoint_secret: Option<String>,
    /// `--endpoint-allow` (each one) or `FLARE_ENDPOINT_ALLOW` (split on commas).
    pub endpoint_allow: Vec<String>,
    /// `--node-name`/`FLARE_NODE_NAME`; `None`: the host name and process id.
    pub node_name: Option<String>,
    /// `--paused`: pause every job at start (opening a copy of a database).
    pub paused: bool,
}

impl RawWorker {
    /// Validates the settings.
    pub fn validate(self) -> Result<WorkerConfig, Error> {
        if self.database_url.trim().is_empty() {
            return Err(Error::Value {
                name: "--database-url/DATABASE_URL",
                reason: "must not be empty".into(),
            });
        }
        let endpoint_allow = endpoint_allow(&self.endpoint_allow)?;
        let mut engine = engine_config(
            self.concurrency,
            self.lease_secs,
            self.retention_days,
            self.shutdown_grace_secs,
        )?;
        engine.node_name = node_name(self.node_name)?;
        Ok(WorkerConfig {
            engine,
            paused: self.paused,
            database_url: self.database_url,
            demo: self.demo,
            endpoints: endpoint_seeds(self.endpoints, self.endpoint_secret, &endpoint_allow)?,
            endpoint_allow,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;

    pub(super) fn raw(listen: &str) -> RawServe {
        RawServe {
            listen: listen.into(),
            database_url: "sqlite://x.db".into(),
            concurrency: 10,
            retention_days: 7,
            lease_secs: 30,
            shutdown_grace_secs: 30,
            ..RawServe::default()
        }
    }

    #[test]
    fn loopback_without_key_is_fine_elsewhere_it_is_refused() {
        assert!(raw("127.0.0.1:3000").validate().is_ok());
        assert!(raw("[::1]:3000").validate().is_ok());
        let err = raw("0.0.0.0:3000").validate().unwrap_err();
        assert!(err.to_string().contains("without FLARE_API_KEY"), "{err}");
        let mut with_key = raw("0.0.0.0:3000");
        with_key.api_key = Some("a-long-enough-secret-key".into());
        assert!(with_key.validate().is_ok());
    }

    #[test]
    fn bad_values_are_named() {
        assert!(matches!(raw("nonsense").validate(), Err(Error::Listen(_))));
        let mut short = raw("127.0.0.1:1");
        short.api_key = Some("short".into());
        assert!(matches!(short.validate(), Err(Error::WeakKey)));
        let mut zero = raw("127.0.0.1:1");
        zero.concurrency = 0;
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--concurrency"));
    }

    #[test]
    fn unusable_webhook_secrets_are_refused_without_showing_them() {
        let mut r = raw("127.0.0.1:1");
        r.clerk_secrets = Some("whsec_not!base64!at-all".into());
        let err = r.validate().unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("CLERK_WEBHOOK_SECRET"), "{shown}");
        assert!(!shown.contains("not!base64"), "{shown}");
        let mut zero = raw("127.0.0.1:1");
        zero.max_body_bytes = Some(0);
        assert!(zero.validate().is_err());
        assert_eq!(
            raw("127.0.0.1:1").validate().expect("valid").body_limit,
            1024 * 1024
        );
    }

    #[test]
    fn worker_settings_are_checked_like_serve_settings() {
        let raw = RawWorker {
            database_url: "sqlite://x.db".into(),
            concurrency: 8,
            retention_days: 0,
            lease_secs: 2,
            shutdown_grace_secs: 5,
            ..RawWorker::default()
        };
        let c = raw.clone().validate().expect("valid");
        assert_eq!(c.engine.concurrency, 8);
        assert_eq!(c.engine.lease, Duration::from_secs(2));
        assert_eq!(c.engine.retention, None, "0 keeps everything");
        let err = RawWorker {
            lease_secs: 0,
            ..raw.clone()
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("--lease-secs"), "{err}");
        let err = RawWorker {
            database_url: " ".into(),
            ..raw.clone()
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("--database-url"), "{err}");
        let err = RawWorker {
            retention_days: u64::MAX,
            ..raw
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("--retention-days"), "{err}");
    }

    #[test]
    fn secrets_split_on_commas_and_never_print() {
        let mut r = raw("127.0.0.1:1");
        r.stripe_secrets = Some("whsec_a, whsec_b,".into());
        r.api_key = Some("super-secret-api-key-1234".into());
        let c = r.validate().expect("valid");
        assert_eq!(c.stripe_secrets, vec!["whsec_a", "whsec_b"]);
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("whsec_a") && !shown.contains("super-secret"),
            "{shown}"
        );
    }

    #[test]
    fn the_metrics_token_is_trimmed_and_a_short_one_refused_and_node_names_checked() {
        let mut r = raw("127.0.0.1:1");
        r.metrics_token = Some("  scrape-token-0123456789\n".into());
        let c = r.validate().expect("valid");
        assert_eq!(c.metrics_token.as_deref(), Some("scrape-token-0123456789"));
        assert!(!format!("{c:?}").contains("scrape-token"), "never shown");
        let mut r = raw("127.0.0.1:1");
        r.metrics_token = Some("short".into());
        let e = r.validate().expect_err("short").to_string();
        assert!(e.contains("FLARE_METRICS_TOKEN"), "{e}");
        let mut r = raw("127.0.0.1:1");
        r.node_name = Some("web 1".into());
        let e = r.validate().expect_err("a space").to_string();
        assert!(e.contains("--node-name"), "{e}");
        let mut r = raw("127.0.0.1:1");
        r.node_name = Some("web-1.eu:a".into());
        let c = r.validate().expect("valid");
        assert_eq!(c.engine.node_name.as_deref(), Some("web-1.eu:a"));
    }

    #[test]
    fn the_api_key_is_trimmed_and_whitespace_alone_is_refused() {
        let with_key = |key: &str| {
            RawServe {
                api_key: Some(key.into()),
                ..raw("0.0.0.0:3000")
            }
            .validate()
        };
        let c = with_key("a-long-enough-secret-key\n").expect("valid");
        assert_eq!(c.api_key.as_deref(), Some("a-long-enough-secret-key"));
        let c = with_key("  a-long-enough-secret-key\r\n").expect("valid");
        assert_eq!(c.api_key.as_deref(), Some("a-long-enough-secret-key"));
        for blank in [" ", "\n", " \t\r\n "] {
            let err = with_key(blank).unwrap_err();
            assert!(matches!(err, Error::BlankKey), "{blank:?}: {err}");
            assert!(err.to_string().contains("FLARE_API_KEY"), "{err}");
        }
        assert!(
            matches!(with_key("short-key  \n"), Err(Error::WeakKey)),
            "the length is checked after trimming"
        );
        let unset = RawServe {
            api_key: Some(String::new()),
            ..raw("127.0.0.1:3000")
        }
        .validate()
        .expect("an empty variable is unset");
        assert_eq!(unset.api_key, None);
    }

    pub(super) const ENDPOINT_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn demo_passes_through() {
        let c = RawServe {
            demo: true,
            ..raw("127.0.0.1:1")
        }
        .validate()
        .expect("valid");
        assert!(c.demo);
        assert!(!raw("127.0.0.1:1").validate().expect("valid").demo);
    }

    #[test]
    fn trusted_proxies_are_ranges_or_one_clear_error() {
        let c = RawServe {
            trusted_proxies: vec!["10.0.0.0/8".into(), "::1".into()],
            ..raw("127.0.0.1:1")
        }
        .validate()
        .expect("valid");
        assert!(c.trusted_proxies.contains("10.1.2.3".parse().expect("ip")));
        assert!(raw("127.0.0.1:1")
            .validate()
            .expect("valid")
            .trusted_proxies
            .is_empty());
        let err = RawServe {
            trusted_proxies: vec!["10.0.0.0/40".into()],
            ..raw("127.0.0.1:1")
        }
        .validate()
        .expect_err("bad prefix")
        .to_string();
        assert!(
            err.contains("--trusted-proxy/FLARE_TRUSTED_PROXIES"),
            "{err}"
        );
    }
}
