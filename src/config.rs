//! Validated configuration of `flare serve` and `flare worker`: raw flags and environment become
//! a [`ServeConfig`] or a [`WorkerConfig`], or one clear [`Error`].

use std::net::SocketAddr;
use std::time::Duration;

use crate::engine::EngineConfig;

/// A configuration problem; the message names the flag or variable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--listen` is not an address.
    #[error("invalid --listen/FLARE_LISTEN {0:?}: expected HOST:PORT such as 127.0.0.1:3000")]
    Listen(String),
    /// A non-loopback listen address without an API key.
    #[error("refusing to listen on {0} without FLARE_API_KEY: set FLARE_API_KEY, or listen on a loopback address such as 127.0.0.1")]
    Unprotected(SocketAddr),
    /// An API key that is too short to be a secret.
    #[error("FLARE_API_KEY is too short: use at least 16 characters")]
    WeakKey,
    /// A webhook signing secret is unusable (the message never shows the secret).
    #[error("invalid {name}: {reason}")]
    WebhookSecret {
        /// The variable.
        name: &'static str,
        /// What is wrong.
        reason: crate::webhooks::VerifyError,
    },
    /// A numeric setting out of range.
    #[error("invalid {name}: {reason}")]
    Value {
        /// The flag.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
}

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
    /// Engine settings.
    pub engine: EngineConfig,
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
                "stripe_secrets",
                &format_args!("<{} redacted>", self.stripe_secrets.len()),
            )
            .field(
                "clerk_secrets",
                &format_args!("<{} redacted>", self.clerk_secrets.len()),
            )
            .field("body_limit", &self.body_limit)
            .field("engine", &self.engine)
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

impl RawServe {
    /// Validates the settings.
    pub fn validate(self) -> Result<ServeConfig, Error> {
        let listen: SocketAddr = self
            .listen
            .parse()
            .map_err(|_| Error::Listen(self.listen.clone()))?;
        let api_key = self.api_key.filter(|k| !k.is_empty());
        match &api_key {
            Some(k) if k.len() < 16 => return Err(Error::WeakKey),
            None if !listen.ip().is_loopback() => return Err(Error::Unprotected(listen)),
            _ => {}
        }
        let engine = engine_config(
            self.concurrency,
            self.lease_secs,
            self.retention_days,
            self.shutdown_grace_secs,
        )?;
        let body_limit = self
            .max_body_bytes
            .unwrap_or(crate::http::body::DEFAULT_BODY_LIMIT);
        if body_limit == 0 {
            return Err(Error::Value {
                name: "--max-body-bytes",
                reason: "must be at least 1".into(),
            });
        }
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
        Ok(ServeConfig {
            listen,
            database_url: self.database_url,
            api_key,
            stripe_secrets,
            clerk_secrets,
            body_limit,
            engine,
        })
    }
}

/// The engine settings both commands share, checked.
fn engine_config(
    concurrency: usize,
    lease_secs: u64,
    retention_days: u64,
    shutdown_grace_secs: u64,
) -> Result<EngineConfig, Error> {
    if concurrency == 0 {
        return Err(Error::Value {
            name: "--concurrency",
            reason: "must be at least 1".into(),
        });
    }
    if lease_secs == 0 {
        return Err(Error::Value {
            name: "--lease-secs",
            reason: "must be at least 1".into(),
        });
    }
    let retention = match retention_days {
        0 => None,
        days => Some(Duration::from_secs(days.checked_mul(86_400).ok_or_else(
            || Error::Value {
                name: "--retention-days",
                reason: format!("{days} days is too long"),
            },
        )?)),
    };
    Ok(EngineConfig {
        concurrency,
        lease: Duration::from_secs(lease_secs),
        retention,
        shutdown_grace: Duration::from_secs(shutdown_grace_secs),
        ..EngineConfig::default()
    })
}

/// Everything `flare worker` needs: where the data is and how the engine runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Database URL.
    pub database_url: String,
    /// Engine settings.
    pub engine: EngineConfig,
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
        Ok(WorkerConfig {
            engine: engine_config(
                self.concurrency,
                self.lease_secs,
                self.retention_days,
                self.shutdown_grace_secs,
            )?,
            database_url: self.database_url,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(listen: &str) -> RawServe {
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
}
