//! Where a repetition of a two-store scenario (`steps`, `drain`) runs: a temporary SQLite file, or
//! a fresh database created for it on the PostgreSQL server of `--database-url` and dropped after
//! it, so every repetition starts from empty tables.

use super::args::{db_url, Args, Error};
use crate::store::postgres::{database_create, database_drop};

/// The store a repetition runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    /// A temporary SQLite file.
    Sqlite,
    /// A fresh database on the server of `--database-url`.
    Postgres,
}

impl Backend {
    pub(super) fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// SQLite, and PostgreSQL too when `--database-url` is a `postgres://` URL.
    pub(super) fn selected(args: &Args) -> Vec<Backend> {
        let mut backends = vec![Backend::Sqlite];
        if args
            .database_url
            .as_deref()
            .is_some_and(crate::store::postgres::is_postgres_url)
        {
            backends.push(Backend::Postgres);
        }
        backends
    }
}

/// One repetition's empty database; [`Place::remove`] deletes it.
pub(super) struct Place {
    url: String,
    _dir: tempfile::TempDir,
    /// The server's URL and the database created on it.
    pg: Option<(String, String)>,
}

impl Place {
    /// A temp SQLite file, or a database `<prefix>_<random>` on the server of `--database-url`.
    pub(super) async fn new(args: &Args, backend: Backend, prefix: &str) -> Result<Place, Error> {
        let dir = tempfile::tempdir()?;
        Ok(match backend {
            Backend::Sqlite => Place {
                url: db_url(dir.path()),
                _dir: dir,
                pg: None,
            },
            Backend::Postgres => {
                let server = args.database_url.as_deref().ok_or_else(|| {
                    Error::Stalled("this scenario on PostgreSQL needs --database-url".into())
                })?;
                let name = format!("{prefix}_{:016x}", rand::random::<u64>());
                let url = database_create(server, &name).await.map_err(|e| {
                    Error::Stalled(format!("cannot create a database on {server}: {e}"))
                })?;
                Place {
                    url,
                    _dir: dir,
                    pg: Some((server.to_string(), name)),
                }
            }
        })
    }

    /// The database's URL.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// Drops the PostgreSQL database (the temp dir goes with `self`).
    pub(super) async fn remove(self) {
        if let Some((server, name)) = &self.pg {
            if let Err(e) = database_drop(server, name).await {
                tracing::warn!(error = %e, database = %name, "could not drop the benchmark's database");
            }
        }
    }
}
