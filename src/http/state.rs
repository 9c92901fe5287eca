//! What the handlers share ([`AppState`]): the client, what HTTP needs of the configuration
//! ([`HttpConfig`], built by `crate::config` from the server's), the webhook verifiers, this
//! node's endpoint registry, and the counts of wrong keys and resent ids.

use std::sync::Arc;

use super::client_ip::TrustedProxies;
use super::login_attempts;
use crate::client::Client;
use crate::endpoints::address::AllowList;
use crate::endpoints::Registry;
use crate::webhooks::inbound::Webhooks;

/// What the HTTP application needs of the server's configuration. `Debug` never shows a secret.
#[derive(Clone, Default)]
pub struct HttpConfig {
    /// Bearer key protecting the API and dashboard; `None` serves loopback only.
    pub api_key: Option<String>,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Reverse proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: TrustedProxies,
    /// The database's URL (the dashboard's caches are keyed by it; never shown).
    pub database_url: String,
    /// Stripe signing secrets.
    pub stripe_secrets: Vec<String>,
    /// Clerk/Svix signing secrets.
    pub clerk_secrets: Vec<String>,
    /// Addresses endpoints may have beyond the default rule.
    pub endpoint_allow: AllowList,
    /// Webhook sources from the file given at start (`--webhook-sources`).
    pub webhook_sources: Vec<crate::webhooks::source::Source>,
    /// `FLARE_METRICS_TOKEN`: a Bearer token that reads `GET /metrics` and nothing else, so a
    /// scraper does not hold the API key.
    pub metrics_token: Option<String>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("body_limit", &self.body_limit)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("stripe_secrets", &self.stripe_secrets.len())
            .field("clerk_secrets", &self.clerk_secrets.len())
            .field("endpoint_allow", &self.endpoint_allow)
            .field("webhook_sources", &self.webhook_sources.len())
            .field(
                "metrics_token",
                &self.metrics_token.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

/// What the handlers share. Cloned for every request (by each layer that takes the state), so it
/// is one shared allocation: a clone is one reference count, not one per field.
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct SharedState {
    /// The client (store, engine).
    pub client: Client,
    /// What HTTP needs of the server's configuration.
    pub config: Arc<HttpConfig>,
    /// Webhook verifiers (built once from the configured secrets) and recent rejections.
    pub webhooks: Arc<Webhooks>,
    /// This node's HTTP job endpoints.
    pub endpoints: Arc<Registry>,
    /// Wrong API keys per client: dashboard sign-ins and every protected route share it.
    pub logins: Arc<login_attempts::LoginAttempts>,
    /// The log lines about event ids resent with another name or payload ([`super::duplicates`]).
    pub conflicts: Arc<crate::log_throttle::LogThrottle>,
}

impl AppState {
    /// The state for `client` under `config`; builds the webhook verifiers. Its endpoint
    /// registry is not started: the API's endpoint actions still apply at once to this process.
    pub fn new(client: Client, config: impl Into<HttpConfig>) -> Self {
        let config = config.into();
        let endpoints = Registry::with_allow(client.clone(), config.endpoint_allow.clone());
        Self::with_endpoints(client, config, endpoints)
    }

    /// The state with the node's running endpoint registry.
    pub fn with_endpoints(
        client: Client,
        config: impl Into<HttpConfig>,
        endpoints: Arc<Registry>,
    ) -> Self {
        let config = config.into();
        Self(Arc::new(SharedState {
            webhooks: Arc::new(Webhooks::with_sources(
                config.stripe_secrets.clone(),
                config.clerk_secrets.clone(),
                config.webhook_sources.clone(),
            )),
            client,
            config: Arc::new(config),
            endpoints,
            logins: Arc::default(),
            conflicts: Arc::default(),
        }))
    }
}
