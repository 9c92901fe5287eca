//! Why a configuration was refused: one clear line naming the flag or variable and the reason.

use std::net::SocketAddr;

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
    /// An API key made only of whitespace (set by mistake, e.g. `FLARE_API_KEY=" "`).
    #[error(
        "FLARE_API_KEY is only whitespace: set a key of at least 16 characters, or leave it unset"
    )]
    BlankKey,
    /// A webhook signing secret is unusable (the message never shows the secret).
    #[error("invalid {name}: {reason}")]
    WebhookSecret {
        /// The variable.
        name: &'static str,
        /// What is wrong.
        reason: crate::webhooks::VerifyError,
    },
    /// An `--endpoint`/`FLARE_ENDPOINTS` URL is unusable. `url` is shown without any user name
    /// or password and shortened.
    #[error("invalid --endpoint/FLARE_ENDPOINTS URL {url:?}: {reason}")]
    Endpoint {
        /// The URL as given, credentials removed, at most 100 characters.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// `FLARE_ENDPOINT_SECRET` is unusable (the message never shows it).
    #[error("invalid FLARE_ENDPOINT_SECRET: {0}")]
    EndpointSecret(String),
    /// Endpoints were given at start without `FLARE_ENDPOINT_SECRET`.
    #[error("FLARE_ENDPOINT_SECRET is required with --endpoint/FLARE_ENDPOINTS: set it to the endpoints' Standard Webhooks secret (whsec_<base64>)")]
    MissingEndpointSecret,
    /// The webhook sources file (`--webhook-sources`) is unusable; never shows a secret.
    #[error("invalid --webhook-sources/FLARE_WEBHOOK_SOURCES file {path}: {reason}")]
    WebhookSources {
        /// The file.
        path: String,
        /// What is wrong (which source, which field).
        reason: String,
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
