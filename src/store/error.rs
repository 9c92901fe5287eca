//! The store's error: what a storage operation can fail with, and whether the caller should answer
//! 503 and try later ([`Error::is_unavailable`]). Also the rule that no stored id, name or source
//! holds a NUL character ([`storable`]), which both backends answer alike.

use std::sync::Arc;

/// A storage failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The database refused or failed the operation (I/O, locked, read-only, a connection that is
    /// gone, …). The cause is the driver's error (SQLite or PostgreSQL), kept as the source.
    #[error("database error: {0}")]
    Database(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// The storage worker has stopped; the store is closed.
    #[error("the store is closed")]
    Closed,
    /// No such record.
    #[error("{what} {id:?} not found")]
    NotFound {
        /// `event`, `run`, …
        what: &'static str,
        /// The id looked up.
        id: String,
    },
    /// The record is not in a state that allows the operation.
    #[error("{0}")]
    Conflict(String),
    /// The request asks for what the store does not do (a payload search longer than
    /// [`super::events::MAX_SEARCH_CHARS`]); the message says what to change.
    #[error("{0}")]
    Invalid(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database was migrated by a newer Flare: its `flare_migrations` holds a version above
    /// the last migration this binary knows, so this binary would run on a schema it does not
    /// understand. Every process of one database runs the same version.
    #[error(
        "the database's schema is at migration {found}, newer than this binary's last migration {known}: \
         it was upgraded by a newer Flare; run that version (upgrade all processes together)"
    )]
    SchemaTooNew {
        /// The highest version recorded in the database.
        found: i64,
        /// The highest version this binary knows.
        known: i64,
    },
    /// The database URL is not understood.
    #[error("unsupported database URL {0:?}: use sqlite://PATH (or a plain file path) or postgres://USER@HOST/DB")]
    Url(String),
}

impl Error {
    /// True when the failure is the storage's (the caller should answer 503 and try later), false
    /// when it is about the request (not found, conflict).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Database(_) | Error::Closed | Error::Corrupt(_))
    }
}

/// Result alias for store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether `text` can be stored as text on every backend: PostgreSQL's `text` cannot hold a NUL
/// character (SQLite's can), so no stored id, name or source contains one. Methods that look
/// records up by such text treat one containing NUL as matching nothing, without asking the
/// database (which on PostgreSQL would fail the query), so both backends answer the same;
/// [`crate::client`] refuses to store an event id containing NUL in the first place.
pub fn storable(text: &str) -> bool {
    !text.contains('\0')
}

/// Refuses a database whose highest recorded migration (`found`) is above `known`, the last one
/// this binary knows: an older binary must not run on a schema a newer one migrated.
pub(crate) fn schema_guard(found: Option<i64>, known: i64) -> Result<()> {
    match found {
        Some(found) if found > known => Err(Error::SchemaTooNew { found, known }),
        _ => Ok(()),
    }
}

/// `NotFound` for an id no record can have (see [`storable`]).
pub(crate) fn unstorable_id(what: &'static str, id: &str) -> Result<()> {
    if storable(id) {
        Ok(())
    } else {
        Err(Error::NotFound {
            what,
            id: id.to_string(),
        })
    }
}
