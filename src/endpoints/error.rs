//! Why an endpoint was refused: its URL, its secret, its index, a job another endpoint serves.

/// Why an endpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is unusable.
    #[error("invalid endpoint URL {url:?}: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The secret is unusable (never shown).
    #[error("invalid endpoint secret: {0}")]
    Secret(String),
    /// Asking the endpoint for its jobs failed, or its answer was refused.
    #[error("indexing the endpoint {url} failed: {reason}")]
    Index {
        /// The endpoint.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// Storage refused or failed.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
}
