//! What the handlers share ([`AppState`]): the client, the server's configuration, the webhook
//! verifiers, this node's endpoint registry, and the counts of wrong keys and resent ids.

use std::sync::Arc;

use super::login_attempts;
use super::webhooks;
use crate::client::Client;
use crate::config::ServeConfig;

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
    /// The server's configuration.
    pub config: Arc<ServeConfig>,
    /// Webhook verifiers (built once from the configured secrets) and recent rejections.
    pub webhooks: Arc<webhooks::Webhooks>,
    /// This node's HTTP job endpoints.
    pub endpoints: Arc<crate::endpoints::Registry>,
    /// Wrong API keys per client: dashboard sign-ins and every protected route share it.
    pub logins: Arc<login_attempts::LoginAttempts>,
    /// The log lines about event ids resent with another name or payload ([`duplicates`]).
    pub conflicts: Arc<crate::log_throttle::LogThrottle>,
}

impl AppState {
    /// The state for `client` under `config`; builds the webhook verifiers. Its endpoint
    /// registry is not started: the API's endpoint actions still apply at once to this process.
    pub fn new(client: Client, config: ServeConfig) -> Self {
        let endpoints =
            crate::endpoints::Registry::with_allow(client.clone(), config.endpoint_allow.clone());
        Self::with_endpoints(client, config, endpoints)
    }

    /// The state with the node's running endpoint registry.
    pub fn with_endpoints(
        client: Client,
        config: ServeConfig,
        endpoints: Arc<crate::endpoints::Registry>,
    ) -> Self {
        Self(Arc::new(SharedState {
            webhooks: Arc::new(webhooks::Webhooks::from_config(&config)),
            client,
            config: Arc::new(config),
            endpoints,
            logins: Arc::default(),
            conflicts: Arc::default(),
        }))
    }
}
